"""helpers.rollouts.checks: each way a rollout_func or reward function can break TRL's contract is named, valid
output passes unchanged, and inside a real GRPOTrainer a broken rollout stops at the first step with our message."""

from __future__ import annotations

import asyncio
import functools
import math

import pytest

from helpers.rollouts.checks import RolloutContractError, checked_rewards, checked_rollout, check_rollout_output

PROMPTS = ["a", "b"]


def valid_output():
    return {"prompt_ids": [[1, 2], [3]], "completion_ids": [[4, 5, 6], [7]],
            "logprobs": [[-0.1, -0.2, 0.0], [-1.0]], "env_mask": [[1, 0, 1], [1]],
            "env_reward": [0.5, 1.0], "step_note": "shared by every row"}


def rollout_returning(output):
    def my_rollout(prompts, trainer):
        return output
    return checked_rollout(my_rollout)


def test_valid_output_passes_unchanged():
    output = valid_output()
    assert rollout_returning(output)(PROMPTS, None) is output
    assert output == valid_output()
    # what TRL also accepts: no env_mask, env_mask None, a logprob vLLM could not score, tensors and numpy rows
    import numpy as np
    import torch

    for change in ({"env_mask": None}, {"logprobs": [[None, -0.2, 0.0], [-1.0]]},
                   {"completion_ids": [torch.tensor([4, 5, 6]), np.array([7])]},
                   {"env_mask": [[True, False, True], [1]]}, {"env_reward": (0.5,)}):
        check_rollout_output({**valid_output(), **change}, 2)
    without_mask = valid_output()
    del without_mask["env_mask"]
    check_rollout_output(without_mask, 2)
    check_rollout_output({**valid_output(), "logprobs": None}, 2)   # no sampling logprobs: fine without vLLM


@pytest.mark.parametrize("change, message", [
    ({"logprobs": "missing"}, r"my_rollout returned no 'logprobs': TRL expects the keys prompt_ids, completion_ids, "
                              r"logprobs, each a list with one row per prompt"),
    ({"prompt_ids": [[1, 2]]}, r"returned 1 rows of 'prompt_ids' for 2 prompts: TRL expects one row per prompt"),
    ({"completion_ids": {"a": [4]}}, r"returned 'completion_ids' as dict: TRL expects a list with one row per prompt"),
    ({"completion_ids": [[4, 5.0, 6], [7]]}, r"'completion_ids' row 0 with 5\.0 \(float\) at position 1: TRL expects "
                                             r"token ids, ints"),
    ({"prompt_ids": [[1, "2"], [3]]}, r"'prompt_ids' row 0 with '2' \(str\) at position 1"),
    ({"completion_ids": [[4, 5, 6], []], "logprobs": [[-0.1, -0.2, 0.0], []], "env_mask": [[1, 0, 1], []]},
     r"empty 'completion_ids' row 1: TRL expects at least one completion token per row"),
    ({"logprobs": [[-0.1, -0.2], [-1.0]]}, r"returned 2 logprobs for the 3 completion_ids of row 0: TRL expects one "
                                           r"log-probability per completion token"),
    ({"logprobs": [[-0.1, "x", 0.0], [-1.0]]}, r"'logprobs' row 0 with 'x' at position 1: TRL expects floats"),
    ({"env_mask": [[1, 0, 1], [1, 1]]}, r"returned 2 env_mask values for the 1 completion_ids of row 1: TRL expects "
                                        r"one per completion token"),
    ({"env_mask": [[1, 2, 1], [1]]}, r"env_mask row 0 with 2 at position 1: TRL expects 1 for a token the model "
                                     r"produced \(trained\) and 0"),
    ({"env_reward": [0.5]}, r"the extra key 'env_reward' with 1 values for 2 prompts: TRL hands value i of a list "
                            r"to the reward functions for prompt i"),
])
def test_each_broken_shape_names_the_key_the_row_and_the_rule(change, message):
    output = valid_output()
    for key, value in change.items():
        if value == "missing":
            del output[key]
        else:
            output[key] = value
    with pytest.raises(RolloutContractError, match=message):
        rollout_returning(output)(PROMPTS, None)


def test_not_a_dict_and_logprobs_vllm_needs():
    with pytest.raises(RolloutContractError, match="my_rollout returned list: TRL expects a dict"):
        rollout_returning([1, 2])(PROMPTS, None)
    assert issubclass(RolloutContractError, ValueError)

    class VllmTrainer:
        use_vllm, vllm_importance_sampling_correction = True, True

    with pytest.raises(RolloutContractError, match="logprobs=None, but this trainer generates with vLLM"):
        check_rollout_output({**valid_output(), "logprobs": None}, 2, trainer=VllmTrainer())


def test_the_wrapper_keeps_the_rollouts_name_and_doc():
    class GameRollout:
        """Plays games."""

        def __call__(self, prompts, trainer):
            return valid_output()

    wrapped = checked_rollout(GameRollout())
    assert wrapped.__name__ == "GameRollout" and wrapped.__doc__ == "Plays games."
    assert wrapped(PROMPTS, None) == valid_output()


# ---------------------------------------------------------------------- reward functions
def reward_len(completions, **kwargs):
    """One per completion."""
    return [float(len(c)) for c in completions]


def test_valid_rewards_pass_unchanged_and_keep_their_names():
    import numpy as np

    [checked] = checked_rewards([reward_len])
    assert checked.__name__ == "reward_len" and checked.__doc__ == "One per completion."
    assert checked(completions=["ab", "c"]) == [2.0, 1.0]
    single = checked_rewards(reward_len)
    assert callable(single) and single.__name__ == "reward_len" and single(["abc"]) == [3.0]

    def maybe(completions, **kwargs):
        return [None, 1, np.float32(0.5), True]

    assert checked_rewards(maybe)(completions=list("abcd")) == [None, 1, np.float32(0.5), True]
    assert checked_rewards(functools.partial(reward_len)).__name__ == "reward_len"
    assert checked_rewards(["org/reward-model"]) == ["org/reward-model"]   # TRL loads and runs reward models itself


@pytest.mark.parametrize("rewards, message", [
    ([1.0], r"reward function 'bad' returned 1 rewards for 2 completions: TRL expects one float \(or None\) per "
            r"completion"),
    ([1.0, "high"], r"reward function 'bad' returned 'high' \(str\) for completion 1: TRL expects one float per "
                    r"completion, or None for one it cannot score"),
    ([math.nan, 1.0], r"reward function 'bad' returned nan for completion 0: TRL expects a finite float, or None"),
    ([1.0, math.inf], r"returned inf for completion 1"),
    (0.5, r"reward function 'bad' returned float: TRL expects a list"),
])
def test_each_broken_reward_names_the_function_the_row_and_the_rule(rewards, message):
    def bad(completions, **kwargs):
        return rewards

    with pytest.raises(RolloutContractError, match=message):
        checked_rewards([bad])[0](prompts=["p", "q"], completions=["x", "y"], completion_ids=[[1], [2]])


def test_async_reward_functions_stay_async():
    from trl.trainer.utils import is_async_callable

    async def reward_async(completions, **kwargs):
        return [1.0] * (len(completions) + 1)

    checked = checked_rewards(reward_async)
    assert is_async_callable(checked) and checked.__name__ == "reward_async"
    with pytest.raises(RolloutContractError, match="returned 3 rewards for 2 completions"):
        asyncio.run(checked(completions=["x", "y"]))


# ---------------------------------------------------------------------- inside a real GRPOTrainer
def tiny_trainer(tmp_path, rollout_func, reward_funcs):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from helpers.model_folders import resolve_model

    args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=4, use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                      logging_steps=1, seed=0)
    return GRPOTrainer(model=resolve_model("tiny"), reward_funcs=checked_rewards(reward_funcs),
                       train_dataset=Dataset.from_dict({"prompt": ["Say hi."] * 2}),
                       rollout_func=checked_rollout(rollout_func), args=args)


@pytest.mark.slow
def test_a_broken_rollout_stops_the_trainer_at_the_first_step_with_our_message(tmp_path):
    def forgetful_rollout(prompts, trainer):
        ids = trainer.processing_class(prompts, add_special_tokens=False)["input_ids"]
        return {"prompt_ids": ids, "completion_ids": [[trainer.processing_class.eos_token_id]] * len(prompts)}

    trainer = tiny_trainer(tmp_path, forgetful_rollout, [reward_len])
    with pytest.raises(RolloutContractError, match="forgetful_rollout returned no 'logprobs': TRL expects the keys"):
        trainer.train()
    assert trainer.state.global_step == 0


@pytest.mark.slow
def test_a_valid_rollout_trains_and_trl_logs_the_reward_under_its_own_name(tmp_path):
    from helpers.rollouts import generate_rollout_completions

    def echo_rollout(prompts, trainer):
        outputs = generate_rollout_completions(trainer, prompts)
        return {"prompt_ids": [o["prompt_ids"] for o in outputs], "completion_ids": [o["completion_ids"] for o in outputs],
                "logprobs": [o["logprobs"] for o in outputs], "env_mask": [[1] * len(o["completion_ids"]) for o in outputs],
                "bonus": [1.0] * len(prompts)}

    def reward_bonus(completions, bonus=None, **kwargs):
        return list(bonus)

    trainer = tiny_trainer(tmp_path, echo_rollout, [reward_len, reward_bonus])
    trainer.train()
    logged = {key for entry in trainer.state.log_history for key in entry}
    assert {"rewards/reward_len/mean", "rewards/reward_bonus/mean"} <= logged
    assert trainer.state.global_step == 1


class _ScoresInWords:
    """An environment class whose edited get_reward returns a word instead of a number."""

    def reset(self, **kwargs) -> str:
        return "Say hi."

    def shout(self, text: str) -> str:
        """Shout the text back.

        Args:
            text: what to shout.
        """
        return text.upper()

    def get_reward(self):
        return "high"


@pytest.mark.slow
def test_an_environment_whose_get_reward_is_not_a_number_stops_at_the_first_step_named(tmp_path):
    """Notebook 01's route: TRL turns an environment class's get_reward() into a reward function; the class the
    notebook hands it is `checked_environment(...)`'s, whose get_reward() is checked at each call."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from helpers.rollouts.checks import checked_environment
    from helpers.model_folders import resolve_model

    args = GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=8, use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                      logging_steps=1, seed=0, max_tool_calling_iterations=1)
    trainer = GRPOTrainer(model=resolve_model("tiny-toolcall"), environment_factory=checked_environment(_ScoresInWords),
                          train_dataset=Dataset.from_dict({"prompt": [[{"role": "user", "content": "Go."}]] * 2}),
                          args=args)
    assert trainer.reward_func_names == ["_ScoresInWords"]   # logged under the class's own name
    with pytest.raises(RolloutContractError, match=r"'_ScoresInWords.get_reward' returned 'high' \(str\) for "
                                                    r"completion 0: TRL expects one float"):
        trainer.train()
    assert trainer.state.global_step == 0
