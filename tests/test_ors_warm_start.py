"""Teacher episodes through the real ORS protocol (notebook 04's warm start): the local teacher's calculator mode,
the agent loop over an `openreward` session, the SFT rows, and the errors that stop a useless warm start."""

from __future__ import annotations

import json

import pytest

from helpers.openreward.local import LocalORSServer
from helpers.openreward.warm_start import (WarmStartDataError, check_warm_start_data, collect_ors_episodes,
                                 describe_episodes, to_sft_row)
from helpers.servers import LocalServer
from helpers.chain_sum.sft_data import Teacher


@pytest.fixture(scope="module")
def ors(tmp_path_factory):
    with LocalORSServer("calculator_env.server:app", log_dir=tmp_path_factory.mktemp("ors-logs")) as server:
        yield server


def _teacher(tmp_path_factory, share: float):
    return LocalServer("helpers.chain_sum.local_teacher:create_app", factory=True, name="teacher",
                       log_dir=tmp_path_factory.mktemp("teacher"),
                       env={"TEACHER_CALCULATE_SHARE": share, "TEACHER_MISTAKE_RATE": 0.2, "TEACHER_SEED": 0})


@pytest.fixture(scope="module")
def mixed_episodes(ors, tmp_path_factory):
    with _teacher(tmp_path_factory, 0.5) as teacher:
        return collect_ors_episodes(ors.url, Teacher.endpoint(teacher.base_url, "t"), n=24, progress=False)


def test_the_teacher_mixes_calculator_lookups_and_its_own_arithmetic(mixed_episodes):
    from calculator_env import make_task, true_answer

    assert [e.task["id"] for e in mixed_episodes] == [make_task("train", i)["id"] for i in range(24)]  # task order
    assert all(e.error is None and e.finished for e in mixed_episodes)
    looked_up = [e for e in mixed_episodes if e.called_calculate]
    assert 0 < len(looked_up) < len(mixed_episodes)
    for e in looked_up:  # calculate -> the server's value -> answer with it -> the verdict -> closing words
        roles = [m["role"] for m in e.messages]
        assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
        assert e.messages[2]["content"] == str(true_answer(e.task))  # computed by the environment
        assert json.loads(e.messages[3]["tool_calls"][0]["function"]["arguments"]) == {"answer": e.messages[2]["content"]}
        assert e.reward == 1.0 and e.messages[4]["content"] == "Correct."
    on_its_own = [e for e in mixed_episodes if not e.called_calculate]
    assert all(e.tools_called == ["answer"] for e in on_its_own)
    wrong = [e for e in on_its_own if e.reward == 0.0]  # the seeded mistakes, graded by the environment
    assert wrong and all(e.messages[2]["content"].startswith("Incorrect") for e in wrong)
    stats = describe_episodes(mixed_episodes)
    assert stats["rewarded"] == len(mixed_episodes) - len(wrong)
    assert stats["rewarded_with_calculate"] == len(looked_up)


def test_sft_rows_keep_every_turn_with_json_string_arguments(mixed_episodes):
    episode = next(e for e in mixed_episodes if e.called_calculate)
    row = to_sft_row(episode, tools_json="[]")
    assert row["messages"][-1] == {"role": "assistant", "content": "Done."}
    calls = [c for m in row["messages"] for c in m.get("tool_calls", [])]
    assert [c["function"]["name"] for c in calls] == ["calculate", "answer"]
    assert all(isinstance(c["function"]["arguments"], str) for c in calls)  # Arrow would merge dict structs


def test_a_useless_warm_start_stops_with_the_knob_to_change(mixed_episodes):
    kept = [e for e in mixed_episodes if e.reward == 1.0]
    check_warm_start_data(kept, collected=len(mixed_episodes))  # a mix: fine
    with pytest.raises(WarmStartDataError, match="Raise TEACHER_CALCULATE_SHARE"):
        check_warm_start_data([e for e in kept if not e.called_calculate], collected=24)
    with pytest.raises(WarmStartDataError, match="Lower TEACHER_CALCULATE_SHARE"):
        check_warm_start_data([e for e in kept if e.called_calculate], collected=24)
    with pytest.raises(WarmStartDataError, match="Only 0 of 24 .*TEACHER_MISTAKE_RATE"):
        check_warm_start_data([], collected=24)


def test_a_teacher_that_never_calculates_is_refused_before_sft(ors, tmp_path_factory):
    with _teacher(tmp_path_factory, 0.0) as teacher:
        episodes = collect_ors_episodes(ors.url, Teacher.endpoint(teacher.base_url, "t"), n=9, progress=False)
    assert not any(e.called_calculate for e in episodes)
    with pytest.raises(WarmStartDataError, match="None of the .* calls `calculate`"):
        check_warm_start_data([e for e in episodes if e.reward == 1.0], collected=9, min_examples=1)


def test_a_teacher_that_does_not_answer_is_named_in_the_error(ors):
    episodes = collect_ors_episodes(ors.url, Teacher.endpoint("http://127.0.0.1:9", "t"), n=3, progress=False)
    assert all(e.error and "Connection" in e.error for e in episodes)
    with pytest.raises(WarmStartDataError, match="3 episodes failed, e.g. APIConnectionError"):
        check_warm_start_data([], collected=3, episodes=episodes)


def test_too_many_episodes_for_the_split_says_so(ors, tmp_path_factory):
    with pytest.raises(WarmStartDataError, match="has 1000 'train' tasks; asked for 5000"):
        collect_ors_episodes(ors.url, Teacher.endpoint("http://127.0.0.1:9", "t"), n=5000, progress=False)


def test_the_cpu_profile_leaves_room_for_a_whole_calculator_rollout(mixed_episodes):
    """GRPO's max_completion_length covers every turn after the prompt (tool results and the closing words
    included: a rollout cut short before its `answer` call is unscored); eval_max_new_tokens covers one assistant
    turn. Counted with SmolLM2's own tokenizer, which splits `<tool_call>` into several tokens: a first run of the
    cpu profile at 96 tokens cut every calculator rollout off and never earned a reward (a whole one is ~144)."""
    from transformers import AutoTokenizer

    from helpers.model_folders import resolve_model
    from helpers.profiles import NOTEBOOK_PROFILES

    cpu = NOTEBOOK_PROFILES["04_openreward_spec"]["cpu"]
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(cpu["model"]))
    episode = max((e for e in mixed_episodes if e.called_calculate), key=lambda e: len(json.dumps(e.messages)))
    def tokens(messages):
        text = tokenizer.apply_chat_template(messages, tokenize=False, enable_thinking=False)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    completion = tokens(episode.messages) - tokens(episode.messages[:1])
    assert 100 < completion and completion + 8 <= cpu["max_completion_length"], completion
    turn = max(len(tokenizer("\n<tool_call>\n" + json.dumps({"name": c["function"]["name"], "arguments": json.loads(
        c["function"]["arguments"])}) + "\n</tool_call><|im_end|>", add_special_tokens=False)["input_ids"])
        for m in episode.messages for c in m.get("tool_calls", []))
    assert turn + 8 <= cpu["eval_max_new_tokens"], turn


def test_the_diagnosis_says_when_the_policy_never_calls_a_tool_or_never_tries_calculate():
    from helpers.openreward.evaluation import SplitEvalResult, diagnose_tool_use

    def result(tool_use, by_difficulty_tools):
        return SplitEvalResult(split="test", n=6, accuracy=0.0, answered=0.0, tool_use=tool_use, by_difficulty={},
                               accuracy_ci=(0.0, 0.4), tool_use_by_difficulty=by_difficulty_tools)

    silent = result({}, {})
    assert "called no tool" in diagnose_tool_use(silent, silent) and "WARM_START=True" in diagnose_tool_use(silent, silent)
    answers_only = result({"answer": 1.0}, {"hard": {"answer": 1.0}})
    assert "Raise TEACHER_CALCULATE_SHARE".lower() in diagnose_tool_use(answers_only, answers_only).lower()
    learned = result({"answer": 1.0, "calculate": 1.0}, {"hard": {"answer": 1.0, "calculate": 1.0}})
    assert "0% of episodes before, 100% after" in diagnose_tool_use(answers_only, learned)
    assert "no shift" in diagnose_tool_use(learned, answers_only)
