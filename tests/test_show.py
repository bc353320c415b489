"""helpers.reporting.show: one rollout on a few lines, whatever shape the trainer or the evaluation gives it."""

from __future__ import annotations

from helpers.reporting.show import compact, rollout_text, sample_rollout


def test_compact_keeps_a_reply_on_one_line():
    assert compact("\n" * 64) == "(blank: 64 whitespace characters)"
    assert compact("") == "(empty)" and compact(None) == "(empty)"
    assert compact("a\n\n  b\tc") == "a b c"
    assert compact("x" * 300, 10) == "x" * 9 + "…"


def test_a_trainer_rollout_shows_prompt_call_reply_and_reward():
    # the shape GRPOTrainer keeps: prompt messages, then assistant messages with parsed tool_calls and tool replies
    messages = [{"role": "system", "content": "Rules."}, {"role": "user", "content": "Compute 3 - 5"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "answer", "arguments": {"answer": "-2"}}}]},
                {"role": "tool", "name": "answer", "content": "score=1.0 correct=-2"},
                {"role": "assistant", "content": "done\n\n"}]
    assert rollout_text(messages, {"ReasoningGymTrainEnv": 1.0}).splitlines() == [
        "system    │ Rules.", "prompt    │ Compute 3 - 5", "tool call │ answer(answer='-2')",
        "env reply │ score=1.0 correct=-2", "model     │ done", "reward    │ ReasoningGymTrainEnv +1.00"]


def test_an_evaluation_reply_is_parsed_from_its_text():
    sample = {"question": "Compute 1 + 2", "reply": 'ok <tool_call>\n{"name": "answer", "arguments": {"answer": "3"}}'
              "\n</tool_call>", "answer": "3", "score": 1.0, "correct_answer": "3"}
    text = rollout_text(*sample_rollout(sample))
    assert "model     │ ok\ntool call │ answer(answer='3')\nenv reply │ score=1.0 correct=3\nreward    │ +1.00" in text
    silent = rollout_text(*sample_rollout({**sample, "reply": "\n" * 64, "answer": None, "score": 0.0}))
    assert "(blank: 64 whitespace characters)" in silent and "(none: the model did not call a tool)" in silent
    assert "env reply" not in silent
