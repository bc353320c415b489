"""Notebook 03: guess parsing, the multi-turn Wordle rollout against the real local server with a real
(tiny) model inside a real GRPOTrainer, the generate_rollout_completions stand-in, and the notebook."""

from __future__ import annotations

import math

import pytest

from helpers import wordle
from helpers.notebooks import cell_outputs_text
from helpers.servers import LocalServer

from eval_checks import assert_precision_recorded


@pytest.mark.parametrize("reply, guess", [
    ("[crane]", "crane"),
    ("[ CRANE ]", "crane"),
    ("Guess: [Slate] because it has common letters", "slate"),
    ("**HOUSE**", "house"),
    ("My first guess is mouse.", "mouse"),
    ("[c-r-a-n-e]", "crane"),
    ("<think>maybe think about words</think>\n[brain]", "brain"),
    ("crane slate", "crane"),
    ("I don't know", None),
    ("", None),
    ("[toolong] and [ab]", None),
])
def test_extract_guess_tolerates_what_small_models_write(reply, guess):
    assert wordle.extract_guess(reply) == guess


def test_guess_message_falls_back_to_the_reply_so_the_game_complains():
    assert wordle.guess_message("so my answer is CRANE") == "[crane]"
    assert wordle.guess_message("  no idea  ") == "no idea"
    assert wordle.guess_message("") == "(no guess)"
    assert len(wordle.guess_message("x" * 1000)) == 200


def test_reward_helpers():
    assert wordle.feedback_counts([]) == (0, 0)
    assert wordle.feedback_counts(["XXXXX", "GYXGY"]) == (2, 2)
    assert wordle.repetition_score([]) == 0.0
    assert wordle.repetition_score(["crane", "slate"]) == 1.0
    assert wordle.repetition_score(["crane", "crane", None, "slate"]) == 0.5
    rewards = wordle.reward_greens(["a", "b"], green_reward=[0.2, 0.4])
    assert rewards == [0.2, 0.4] and wordle.reward_correct(["a"]) == [0.0]


def test_summarize_compares_first_and_last_steps():
    def game(step, correct, won, guesses):
        parsed = [g for g in guesses if g]
        return {"step": step, "correct": correct, "green": 0.2 * step, "yellow": 0.0, "repetition": 1.0,
                "won": won, "turns": len(guesses), "parsed_guesses": len(parsed),
                "repeated_guesses": len(parsed) - len(set(parsed))}

    episodes = [game(0, 0.0, False, ["crane", "crane"]), game(0, 0.1, False, [None]),
                game(1, 0.5, False, ["slate"]), game(2, 1.0, True, ["house", "mouse"])]
    summary = wordle.summarize(episodes)
    assert summary["episodes"] == 4 and summary["steps_with_rollouts"] == 3
    assert summary["win_rate"] == 0.25
    assert summary["repeated_guess_rate"] == pytest.approx(1 / 5)
    assert summary["correct_first"] == pytest.approx(0.05) and summary["correct_last"] == 1.0
    assert summary["green_first"] == 0.0 and summary["green_last"] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="No games"):
        wordle.summarize([])


# ---------------------------------------------------------------------- real server + real trainer
@pytest.fixture(scope="module")
def wordle_url(tmp_path_factory):
    with LocalServer("textarena_env.server.app:app", env={"MAX_CONCURRENT_ENVS": "16"},
                     name="textarena", log_dir=tmp_path_factory.mktemp("logs")) as server:
        yield server.base_url


def make_trainer(tmp_path, rollout, **config):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from helpers.models import resolve_model

    args = dict(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=4, num_generations=2,
                max_completion_length=8, use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                logging_steps=1, chat_template_kwargs={"enable_thinking": False}, seed=0)
    args.update(config)
    return GRPOTrainer(model=resolve_model("tiny"), reward_funcs=wordle.REWARD_FUNCS,
                       train_dataset=Dataset.from_dict({"prompt": [wordle.DATASET_PROMPT] * 8}),
                       rollout_func=rollout, args=GRPOConfig(**args))


@pytest.mark.slow
def test_multi_turn_rollout_output_is_consistent_across_turns(wordle_url, tmp_path):
    rollout = wordle.WordleRollout(wordle_url, max_turns=3, seed=100)
    trainer = make_trainer(tmp_path, rollout)
    tokenizer = trainer.processing_class
    try:
        out = rollout([wordle.DATASET_PROMPT] * 4, trainer)
    finally:
        rollout.close()

    keys = {"prompt_ids", "completion_ids", "logprobs", "env_mask", "correct_reward", "green_reward",
            "yellow_reward", "repetition_reward"}
    assert set(out) == keys and all(len(v) == 4 for v in out.values())
    eos = tokenizer.eos_token_id
    for i in range(4):
        ids, logprobs, mask = out["completion_ids"][i], out["logprobs"][i], out["env_mask"][i]
        assert len(ids) == len(logprobs) == len(mask) > 0
        assert "You are Playing Wordle" in tokenizer.decode(out["prompt_ids"][i])
        assert mask[0] == 1 and mask[-1] == 1  # starts and ends with the model's own tokens
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask) if m == 0)
        assert all(lp <= 0.0 and math.isfinite(lp) for lp, m in zip(logprobs, mask) if m == 1)
        for key in ("correct_reward", "green_reward", "yellow_reward", "repetition_reward"):
            assert 0.0 <= out[key][i] <= 1.0

    # Every game got past turn 1 (one invalid move never ends a game), so each has environment turns,
    # and each environment segment is the game's reply wrapped as a user turn by the chat template.
    games = rollout.episodes
    assert len(games) == 4 and all(g["turns"] >= 2 for g in games)
    for i in range(4):
        mask, ids = out["env_mask"][i], out["completion_ids"][i]
        segments, start = [], None
        for j, m in enumerate(mask + [1]):
            if m == 0 and start is None:
                start = j
            elif m == 1 and start is not None:
                segments.append(ids[start:j])
                start = None
        assert len(segments) == games[i]["turns"] - 1
        for segment in segments:
            text = tokenizer.decode(segment)
            assert "<|im_start|>user" in text and text.rstrip().endswith("</think>")
            assert "You submitted" in text or "invalid move" in text
    # one GRPO group = one secret word
    assert [g["seed"] for g in games] == [100, 100, 101, 101]
    assert rollout.next_seed == 102


@pytest.mark.slow
def test_env_turn_ids_follow_the_chat_template(wordle_url, tmp_path):
    from helpers.rollouts import env_turn_ids, tokenizer_of

    trainer = make_trainer(tmp_path, wordle.WordleRollout(wordle_url))
    ids = env_turn_ids(trainer, "Feedback:\nC R A N E\nX G X X X")
    assert tokenizer_of(trainer).decode(ids) == (
        "\n<|im_start|>user\nFeedback:\nC R A N E\nX G X X X<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


@pytest.mark.slow
def test_generate_rollout_completions_returns_the_sampling_logprobs(wordle_url, tmp_path):
    """Without vLLM: logprobs equal the model's own log-softmax (temperature 1, no top-k)."""
    import torch

    from helpers.rollouts import generate_rollout_completions

    trainer = make_trainer(tmp_path, wordle.WordleRollout(wordle_url), temperature=1.0, top_k=0)
    tokenizer = trainer.processing_class
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                             tokenize=False) for q in ("Guess a word.", "Hi")]
    outputs = generate_rollout_completions(trainer, prompts, max_new_tokens=6)
    assert len(outputs) == 2
    for out in outputs:
        assert 0 < len(out["completion_ids"]) == len(out["logprobs"]) <= 6
        assert out["text"] == tokenizer.decode(out["completion_ids"], skip_special_tokens=True)
        ids = torch.tensor([out["prompt_ids"] + out["completion_ids"]])
        with torch.no_grad():
            logits = trainer.model(input_ids=ids).logits[0, len(out["prompt_ids"]) - 1:-1].float()
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out["completion_ids"])[:, None])[:, 0]
        assert torch.allclose(torch.tensor(out["logprobs"]), expected, atol=1e-3)


@pytest.mark.notebook
def test_notebook_runs_tiny(notebook_runner):
    metrics, executed = notebook_runner("03_wordle_rollout_func")
    assert metrics["profile"] == "tiny" and metrics["generation_mode"].startswith("transformers")
    assert metrics["episodes"] == 2 * 4  # 2 steps x 4 games
    assert metrics["rollout_lengths_consistent"] is True
    assert metrics["activation_checkpointing"] is False  # CPU: TRL's default would only cost time
    assert metrics["model_dtype"] == "torch.float32"   # a loaded fp32 model, whatever the precision
    assert_precision_recorded(metrics, cell_outputs_text(executed))
    for key in ("correct", "green", "yellow", "repetition"):
        for when in ("first", "last"):
            assert 0.0 <= metrics[f"{key}_{when}"] <= 1.0
    for key in ("win_rate", "repeated_guess_rate", "guess_parse_rate"):
        assert 0.0 <= metrics[key] <= 1.0
    assert metrics["mean_turns"] >= 2  # one invalid move never ends a game
    assert metrics["echo_steps"] == 1 and metrics["echo_env_reward_first"] is not None
    assert metrics["echo_env_rewards_seen"] > 0   # env_reward reached the reward function through rollout_func
    assert metrics["factory_steps"] == 1
    # one of the environment_factory model's own rollouts, shown whole (helpers.show)
    text = cell_outputs_text(executed)
    assert "One rollout of the last step:\nprompt    │ Play Wordle" in text and "\ntool call │ " in text
    assert "reward    │ factory_correct +" in text and "factory_greens +" in text
    # one rollout_func game token by token: the model's guesses trained, the game's feedback masked, template checked
    assert "MODEL (trained), " in text and "ENV (masked), " in text and "You submitted" in text
    assert "✓ the chat template is prefix-preserving (feedback turns append" in text
    assert "✓ env_mask has one 0/1 per completion token" in text
