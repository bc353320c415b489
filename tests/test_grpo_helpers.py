"""helpers.chain_sum.grpo: env-pool sizing checked against a real GRPOTrainer (whose model helpers.reporting.publish then saves),
the reward delta, the diagnosis."""

from __future__ import annotations

import random

import pytest

from helpers.chain_sum.grpo import (
    RewardDelta,
    arithmetic_statements,
    check_dataset_name,
    diagnose,
    env_sessions_needed,
    group_advantages,
    question_seeds,
    reward_delta,
    working_reward,
)
from helpers.prompts import SYSTEM_PROMPT, system_prompt_for
from helpers.reporting.publish import publish


def _config(tmp_path, **kw):
    from trl import GRPOConfig

    base = dict(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, report_to="none",
                save_strategy="no", logging_steps=1)
    return GRPOConfig(**{**base, **kw})


def test_sessions_follow_the_generation_batch(tmp_path):
    # the gpu profile's config: 1 rollout per device x 4 accumulation steps = 4 sessions (+1 for evaluation)
    seed = _config(tmp_path, per_device_train_batch_size=1, gradient_accumulation_steps=4, num_generations=2)
    assert env_sessions_needed(seed) == 5
    assert env_sessions_needed(seed, extra=0) == 4
    wide = _config(tmp_path, per_device_train_batch_size=8, gradient_accumulation_steps=1, num_generations=4)
    assert env_sessions_needed(wide) == 9
    # an explicit steps_per_generation (not gradient accumulation) sets the generation batch
    spg = _config(tmp_path, per_device_train_batch_size=4, steps_per_generation=3, num_generations=4)
    assert env_sessions_needed(spg) == 13


def test_trainer_pool_fits_the_computed_server_cap(tmp_path, monkeypatch):
    """A real GRPOTrainer against a server capped at exactly env_sessions_needed(config) sessions.

    TRL opens one session per rollout of a generation batch; the evaluation's session is opened
    while that pool is still alive. A smaller cap would refuse a session and stop training.
    """
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from helpers.model_folders import resolve_model
    from helpers.servers import LocalServer
    from reasoning_gym_env import ReasoningGymEnv

    config = _config(tmp_path, per_device_train_batch_size=2, gradient_accumulation_steps=2, num_generations=2,
                     max_steps=1, max_completion_length=8, max_tool_calling_iterations=1, learning_rate=1e-5)
    cap = env_sessions_needed(config)
    made = []

    with LocalServer("reasoning_gym_env.server.app:app", env={"MAX_CONCURRENT_ENVS": str(cap)},
                     name="rg_cap", log_dir=tmp_path) as server:

        class CountedEnv:
            def __init__(self):
                self.client = ReasoningGymEnv(base_url=server.base_url).sync()
                self.seed = random.randint(0, 2**31 - 1)
                self.started = False
                self.reward = 0.0
                made.append(self)

            def reset(self, **kwargs) -> str:
                if self.started:
                    result = self.client.reset()
                else:
                    result = self.client.reset(dataset_name="chain_sum", dataset_config={}, seed=self.seed, size=50)
                    self.started = True
                return result.observation.question

            def answer(self, answer: str) -> str:
                """Submit the final answer for the current question.

                Args:
                    answer: The agent's answer (will be parsed as a number server-side).
                """
                return answer

        path = resolve_model("tiny")
        rows = [[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": ""}]] * 8
        trainer = GRPOTrainer(
            model=AutoModelForCausalLM.from_pretrained(path), processing_class=AutoTokenizer.from_pretrained(path),
            reward_funcs=lambda environments, **kw: [e.reward for e in environments],
            train_dataset=Dataset.from_dict({"prompt": rows}), args=config, environment_factory=CountedEnv)
        trainer.train()
        assert len(made) == cap - 1 == config.generation_batch_size
        assert all(env.started for env in made)
        # the pool still holds its sessions: the evaluation's extra one must fit under the cap
        with ReasoningGymEnv(base_url=server.base_url).sync() as evaluation:
            assert evaluation.reset(dataset_name="chain_sum", seed=1, size=3).observation.question

    # publishing: always a local copy; a push without a token, or to an unreachable Hub, is reported, not raised
    tokenizer = trainer.processing_class
    saved = publish(trainer, tokenizer, tmp_path / "model")
    assert saved == {"saved_to": str(tmp_path / "model"), "merged_to": None, "pushed_to": None, "push_error": None}
    assert (tmp_path / "model" / "model.safetensors").exists() and (tmp_path / "model" / "tokenizer.json").exists()
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no stored login either
    assert "no Hugging Face token" in publish(trainer, tokenizer, tmp_path / "m2", push=True, repo_id="someone/m2")["push_error"]
    monkeypatch.setenv("HF_TOKEN", "hf_placeholder")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # what an unreachable Hub looks like, without waiting on DNS
    failed = publish(trainer, tokenizer, tmp_path / "m3", push=True, repo_id="someone/m3")
    assert failed["pushed_to"] is None and failed["push_error"]


def _log(*rewards, **extra):
    return [{"reward": r, "step": i + 1, **extra} for i, r in enumerate(rewards)] + [{"train_runtime": 1.0}]


def test_reward_delta_is_the_seeds_first_and_last_five():
    d = reward_delta(_log(0.1, 0.1, 0.2, 0.2, 0.2, 0.5, 0.6, 0.6, 0.7, 0.7, 0.8, 0.8))
    assert d.window == 5 and d.logged == 12
    assert d.initial == pytest.approx(0.16)
    assert d.final == pytest.approx(0.72)
    assert d.delta == pytest.approx(0.56)


def test_reward_delta_shrinks_the_window_for_short_runs():
    d = reward_delta(_log(0.0, 0.25, 0.5))
    assert d.window == 1 and d.initial == 0.0 and d.final == 0.5
    one = reward_delta(_log(0.4))
    assert one.delta == 0.0 and one.window == 1
    with pytest.raises(ValueError, match="logging_steps"):
        reward_delta([{"loss": 1.0}])


def test_reward_delta_carries_its_own_noise():
    d = reward_delta(_log(0.0, 1.0, 0.0, 1.0, 1.0, 0.0))   # windows of 3: [0, 1, 0] and [1, 1, 0]
    assert d.window == 3 and d.noise == pytest.approx(((1 / 3 + 1 / 3) / 3) ** 0.5)
    assert reward_delta(_log(0.0, 0.5)).noise is None   # one step a window: no spread to read


@pytest.mark.parametrize("initial, final, calls, verdict", [
    (0.30, 0.55, 1.0, "reward_rose"),
    (0.95, 0.96, 1.0, "too_easy"),
    (0.05, 0.05, 1.0, "too_hard"),
    (0.60, 0.40, 1.0, "reward_fell"),
    (0.50, 0.51, 1.0, "reward_flat"),
    (0.00, 0.00, 0.0, "no_tool_calls"),
    (0.05, 0.05, None, "too_hard"),
])
def test_diagnosis_from_the_training_reward_where_no_evaluation_ran(initial, final, calls, verdict):
    d = diagnose(RewardDelta(initial, final, final - initial, 5, 10), tool_call_frequency=calls)
    assert d.verdict == verdict
    assert f"{(final - initial) * 100:+.1f} pp" in d.message


def test_diagnosis_points_to_sft_when_format_bound():
    assert "notebook 02" in diagnose(RewardDelta(0.0, 0.0, 0.0, 1, 2), tool_call_frequency=0.0).message
    assert "notebook 02" in diagnose(RewardDelta(0.02, 0.02, 0.0, 1, 2)).message


def _stored_seed(seed: int) -> list[dict]:
    """The training reward of notebook 01's reference run `seed` (helpers/reporting/reference_runs.json)."""
    from helpers.reporting.reference import REFERENCE_FILE, load_references

    runs = load_references(REFERENCE_FILE)["01_grpo_walkthrough"]["cpu"]["runs"]
    return _log(*next(run for run in runs if run["seed"] == seed)["curves"]["reward"])


def test_the_held_out_pair_decides_not_the_training_reward():
    """Measured seeds of notebook 01's cpu recipe: seed 3's training reward fell 0.46 -> 0.29 and it gained +7.0
    [+4.0, +9.9] held-out; seed 0's went 0.23 -> 0.21 and it gained +3.5 [+0.6, +6.4]. The old reading (+-0.02)
    told the first to cut steps or the learning rate and could tell the second to raise it (2e-5 collapsed)."""
    from helpers.reporting.intervals import PairedChange

    fell, flat = reward_delta(_stored_seed(3)), reward_delta(_stored_seed(0))
    assert (round(fell.initial, 2), round(fell.final, 2)) == (0.46, 0.29) and fell.delta < -0.02
    assert (round(flat.initial, 2), round(flat.final, 2)) == (0.23, 0.21)
    gained = diagnose(fell, change=PairedChange(900, 0.070, (0.040, 0.099), 133, 68), tool_call_frequency=1.0)
    assert gained.verdict == "improved"
    assert "Held-out +7.0 points [+4.0, +9.9] on the same 900 questions" in gained.message
    assert diagnose(flat, change=PairedChange(900, 0.035, (0.006, 0.064), 113, 85)).verdict == "improved"
    # without an evaluation, both rewards moved within their own noise (+-0.36 and +-0.27): no verdict either way
    assert diagnose(fell).verdict == diagnose(flat).verdict == "reward_flat"
    assert fell.noise > 0.15 and "its noise +-36 pp" in diagnose(fell).message
    within = diagnose(fell, change=PairedChange(900, 0.013, (-0.018, 0.043), 107, 95))
    worse = diagnose(fell, change=PairedChange(900, -0.112, (-0.146, -0.078), 50, 151))
    assert within.verdict == "within_noise" and "SEED" in within.message and "EVAL_N" in within.message
    assert worse.verdict == "worse" and "MIXED_ONLY" in worse.message and "measured worse" in worse.message


def test_no_diagnosis_advises_what_the_measurements_rejected():
    from helpers.reporting.intervals import PairedChange

    changes = [None] + [PairedChange(900, c, (c - 0.03, c + 0.03), 100, 100) for c in (-0.1, 0.0, 0.1)]
    for initial, final in [(0.95, 0.96), (0.05, 0.05), (0.5, 0.51), (0.3, 0.6), (0.6, 0.3)]:
        for change in changes:
            message = diagnose(RewardDelta(initial, final, final - initial, 5, 10), change=change).message.lower()
            for advice in ("raise learning_rate", "raise the learning rate", "higher learning rate",
                           "reduce max_steps", "raise num_generations", "set mixed_only", "keep only mixed"):
                assert advice not in message, (initial, final, change, message)
            for knob in ("mixed_only", "working_reward", "exact_reward", "num_iterations"):
                assert knob not in message or "measured worse" in message


def test_dataset_names():
    for name in ("chain_sum", "simple_equations", "letter_counting", "propositional_logic"):
        check_dataset_name(name)
    with pytest.raises(ValueError) as err:
        check_dataset_name("chain_sums")
    assert "chain_sum" in str(err.value) and "letter_counting" in str(err.value) and "Did you mean" in str(err.value)
    assert system_prompt_for("chain_sum") == SYSTEM_PROMPT
    assert "answer" in system_prompt_for("letter_counting") and "addition" not in system_prompt_for("letter_counting")


@pytest.mark.parametrize("name", ["simple_equations", "letter_counting", "propositional_logic"])
def test_env_serves_the_suggested_datasets(rg_server, name):
    from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv

    with ReasoningGymEnv(base_url=rg_server.base_url).sync() as env:
        question = env.reset(dataset_name=name, dataset_config={}, seed=3, size=5).observation.question
        assert question
        step = env.step(ReasoningGymAction(answer="x"))
        assert step.done and 0.0 <= float(step.observation.score or 0.0) <= 1.0 and step.observation.correct_answer


def test_group_advantages_match_trls_own_computation():
    """The notebook's worked example must be the trainer's arithmetic: compare with TRL 1.16's formula
    (group mean, TRL's nanstd with Bessel's correction, + 1e-4) computed with its own torch helpers."""
    import torch
    from trl.trainer.utils import nanstd

    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    group = group_advantages(rewards)
    t = torch.tensor(rewards)
    expected = (t - t.mean()) / (nanstd(t) + 1e-4)
    assert group.mean == pytest.approx(3 / 8)
    assert group.std == pytest.approx(float(nanstd(t)))
    assert group.advantages == pytest.approx(expected.tolist(), abs=1e-6)
    assert all(a > 0 for r, a in zip(rewards, group.advantages) if r == 1.0)   # right answers pushed up
    assert sum(group.advantages) == pytest.approx(0.0, abs=1e-6)

    same = group_advantages([1.0] * 8)   # everyone right: no signal
    assert same.std == 0.0 and same.advantages == [0.0] * 8 and "teaches nothing" in str(same)
    assert group_advantages([0.5, 1.0], scale_rewards="none").advantages == [-0.25, 0.25]
    with pytest.raises(ValueError):
        group_advantages([1.0], scale_rewards="batch")


def test_trl_still_defaults_to_group_scaling():
    from trl import GRPOConfig

    assert GRPOConfig(output_dir="unused", use_cpu=True, bf16=False, report_to="none").scale_rewards == "group"


def test_sample_group_samples_n_replies_to_one_prompt():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from helpers.chain_sum.grpo import sample_group
    from helpers.model_folders import resolve_model
    from helpers.prompts import answer_tool

    path = resolve_model("tiny-toolcall")
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "What is 12 + 30?"}]
    group = sample_group(model, tokenizer, messages, n=4, tools=[answer_tool], max_new_tokens=32)
    assert len(group["replies"]) == len(group["completion_ids"]) == 4 and group["prompt_ids"]
    assert all(0 < len(ids) <= 32 for ids in group["completion_ids"])
    assert all(r.startswith("<tool_call>") for r in group["replies"])   # tiny-toolcall learned the shape of a call


def test_same_question_share_reads_groups_in_rollout_order():
    from helpers.chain_sum.grpo import same_question_share

    assert same_question_share(["a", "a", "b", "b"], 2) == 1.0
    assert same_question_share(["a", "b", "b", "b"], 2) == 0.5
    assert same_question_share([], 8) == 0.0


def test_question_seeds_keep_the_natural_draw_or_serve_the_asked_share_of_carries_and_borrows():
    """None: the same seeds as drawing them in order (so runs before the knob are reproduced). A share: that
    share of the rows, evenly spread, are questions whose column work carries or borrows, by the teacher's own
    working (`working_kind`), and the seeds stay distinct and above the evaluation's."""
    import reasoning_gym

    from helpers.chain_sum.local_teacher import working_kind

    config = {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2}
    draw = random.Random(7)
    assert question_seeds(50, 7, low=1000) == [draw.randint(1000, 2**31 - 1) for _ in range(50)]

    def needs_column_work(seed):
        kind = working_kind(reasoning_gym.create_dataset("chain_sum", seed=seed, size=1, **config)[0]["question"])
        return "carry" in kind.split(", ") or "borrow" in kind.split(", ")

    natural = [needs_column_work(s) for s in question_seeds(200, 7, low=1000)]
    assert 0.3 < sum(natural) / 200 < 0.7          # about half, and both kinds present
    for share in (0.0, 0.75, 1.0):
        seeds = question_seeds(200, 7, low=1000, dataset_config=config, carry_borrow_share=share)
        hard = [needs_column_work(s) for s in seeds]
        assert sum(hard) == round(200 * share) and len(set(seeds)) == 200 and min(seeds) >= 1000
        assert all(sum(hard[i:i + 4]) == round(4 * share) for i in range(0, 200, 4))   # spread, not front-loaded
    with pytest.raises(ValueError, match="between 0 and 1"):
        question_seeds(4, 0, low=1000, carry_borrow_share=75)
    with pytest.raises(ValueError, match="letter_counting"):
        question_seeds(4, 0, low=1000, dataset_name="letter_counting", carry_borrow_share=0.5)


def test_working_reward_scores_the_share_of_true_sums_in_the_teachers_format():
    import reasoning_gym

    from helpers.chain_sum.local_teacher import worked_solution

    questions = [row["question"] for row in reasoning_gym.create_dataset(
        "chain_sum", seed=11, size=300, min_terms=2, max_terms=3, min_digits=2, max_digits=2)]
    for question in questions:                      # every sum the teacher writes is read, and true
        working = worked_solution(question)
        truths = arithmetic_statements(working)
        assert len(truths) >= 3 and all(truths), (question, working, truths)
    # the mistakes GRPO's rollouts make (docs/measurements.md): a borrow skipped, a carry added wrongly
    assert arithmetic_statements("80 - 63: ones 0 - 3 = 3; tens 8 - 6 = 2. 80 - 63 = 23.") == [False, True, False]
    assert arithmetic_statements("46 + 57: ones 6 + 7 = 13, carry 1; tens 4 + 5 + 1 = 11") == [True, False]
    assert arithmetic_statements("14 - 55 = -(55 - 14). 14 - 55 = -41.") == [True]   # "= -(...)" is no statement
    assert arithmetic_statements("The answer is 41.") == []

    reward = working_reward(0.5)
    assert reward.__name__ == "working"             # TRL logs it as rewards/working/mean
    call = '<tool_call>{"name": "answer", "arguments": {"answer": "23"}}</tool_call>'
    completions = [
        [{"role": "assistant", "content": "80 - 63: ones 10 - 3 = 7, borrow 1; tens 8 - 1 - 6 = 1. 80 - 63 = 17." + call},
         {"role": "tool", "content": "score=1.0 correct=17 and 2 + 2 = 5"}],      # the tool's text is not the policy's
        [{"role": "assistant", "content": "80 - 63: ones 0 - 3 = 3; tens 8 - 6 = 2. 80 - 63 = 23." + call}],
        [{"role": "assistant", "content": call}],                                 # no working: nothing to pay
        "ones 2 + 2 = 4",                                                         # a plain-text completion
    ]
    assert reward(completions) == pytest.approx([0.5, 0.5 / 3, 0.0, 0.5])
    with pytest.raises(ValueError, match="WORKING_REWARD"):
        working_reward(0)
