"""Notebook 02's plumbing lines (helpers/chain_sum/sft_steps.py, and sft_data's row checks): each does what the cell it
replaced did, prints what a learner reads, and stops with a clear error on bad input."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from helpers.chain_sum.sft_data import CollectSummary, NoExamplesError, Teacher, TeacherError, assistant_text, check_rows
from helpers.chain_sum.sft_steps import (
    check_publishing,
    load_student,
    report_kept,
    show_episode,
    start_environment,
    start_teacher,
)
from helpers.prompts import SYSTEM_PROMPT
from helpers.servers import free_port


def teacher_settings(**overrides):
    values = dict(teacher="local", teacher_model="gpt-5-mini", teacher_mistake_rate=0.0, teacher_no_tool_rate=0.0,
                  teacher_shows_work=True)
    return SimpleNamespace(**{**values, **overrides})


def test_check_publishing_refuses_a_push_it_cannot_make_and_lets_no_push_through():
    with pytest.raises(ValueError, match="HUB_DATASET_ID"):
        check_publishing(True, None, "me/model", None, "none")
    from helpers.reporting.publish import PublishError

    with pytest.raises(PublishError, match="HUB_MODEL_ID"):
        check_publishing(True, "me/rows", None, None, "none")
    check_publishing(False, None, None, None, "none")   # nothing opted in: nothing to check


def test_start_environment_uses_a_given_url_and_refuses_no_capacity(rg_server, capsys):
    url, server = start_environment(rg_server.base_url + "/")
    assert (url, server) == (rg_server.base_url, None)
    assert f"environment: {rg_server.base_url} (given URL)" in capsys.readouterr().out
    with pytest.raises(ValueError, match="max_concurrent_envs"):
        start_environment(rg_server.base_url, max_concurrent_envs=0)


def test_start_teacher_starts_and_probes_the_local_stand_in(capsys):
    teacher, server = start_teacher(teacher_settings(), system_prompt=SYSTEM_PROMPT, max_tokens=256, seed=3)
    try:
        assert server is not None and teacher.url == server.base_url
        assert (teacher.kind, teacher.model, teacher.tag) == ("local", "chain-sum-teacher", "chain-sum-teacher-worked")
        out = capsys.readouterr().out
        assert "teacher: local (TEACHER / the profile)" in out and "(local stand-in)" in out
        assert "one real request ->" in out and "'name': 'answer'" in out and "WARNING" not in out
    finally:
        server.stop()


def test_start_teacher_errors_name_what_to_set(monkeypatch):
    with pytest.raises(ValueError, match='Unknown TEACHER .*"local", "openai" or "endpoint"'):
        start_teacher(teacher_settings(teacher="anthropic"), system_prompt=SYSTEM_PROMPT)
    with pytest.raises(ValueError, match="needs LLM_ENDPOINT"):
        start_teacher(teacher_settings(teacher="endpoint"), system_prompt=SYSTEM_PROMPT)
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TeacherError, match=f"No teacher answers at {url}"):
        start_teacher(teacher_settings(), system_prompt=SYSTEM_PROMPT, llm_endpoint=url)


def test_teacher_kind_and_tag():
    assert (Teacher.openai("gpt-5-mini").kind, Teacher.openai("gpt-5-mini").tag) == ("openai", "gpt-5-mini")
    endpoint = Teacher.endpoint("http://h/", "m", 8001)
    assert (endpoint.kind, endpoint.tag, endpoint.url) == ("endpoint", "m", "http://h")


EPISODE = {"episode_id": "ep-0", "reward": 1.0, "artifacts": {"correct_answer": "3"}, "messages": [
    {"role": "user", "content": "State the final answer to the following arithmetic problem: 1 + 2 ="},
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "answer", "arguments": '{"answer": "3"}'}}]},
    {"role": "tool", "content": '{"score": 1.0}'}]}


def test_show_episode_prints_the_stored_episode_then_the_rollout(capsys):
    show_episode(EPISODE)
    out = capsys.readouterr().out
    assert json.dumps({k: EPISODE[k] for k in ("episode_id", "messages", "reward")}, indent=1) in out
    assert "The same episode as a rollout" in out and "tool call │ answer(answer=" in out
    with pytest.raises(ValueError, match="Not an episode of results.jsonl"):
        show_episode({"messages": []})


def test_report_kept_prints_the_filter_and_stops_on_nothing_kept(capsys):
    wrong = {**EPISODE, "episode_id": "ep-1", "reward": 0.0}
    examples = [{"episode_id": r["episode_id"], "reward": r["reward"],
                 "messages": [{"role": "system", "content": SYSTEM_PROMPT}, *r["messages"][:2]]}
                for r in (EPISODE, wrong)]
    summary = CollectSummary(requested=3, in_file=2, collected=2, failed=1,
                             output="failed ep-2: the teacher called no tool\n")
    assert report_kept([EPISODE, wrong], examples, examples[:1], summary) == (1, 1)
    out = capsys.readouterr().out
    assert "requested 3 | collected 2 | reward 1: 1 | reward < 1 (filtered out): 1 | failed, no reward: 1" in out
    assert "failed x1: the teacher called no tool" in out and "a filtered-out episode" in out
    with pytest.raises(NoExamplesError, match="TEACHER_MISTAKE_RATE"):
        report_kept([wrong], examples[1:], [], summary)
    with pytest.raises(TypeError, match="CollectSummary"):
        report_kept([EPISODE], examples[:1], examples[:1], "collect output")


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from helpers.model_folders import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("tiny"))


def row(work: str, answer: str) -> dict:
    from helpers.chain_sum.sft_data import answer_tool_schema

    return {"tools": json.dumps([answer_tool_schema()]), "messages": [
        {"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "1 + 2 ="},
        {"role": "assistant", "content": work, "tool_calls": [
            {"type": "function", "function": {"name": "answer", "arguments": json.dumps({"answer": answer})}}]}]}


def test_check_rows_passes_good_rows_and_stops_on_a_bad_one(tokenizer, capsys):
    good, worked = row("", "3"), row("1 + 2 = 3.", "3")
    assert assistant_text(tokenizer, good).strip().startswith("<tool_call>")
    assert assistant_text(tokenizer, worked).startswith("1 + 2 = 3.")
    assert check_rows(tokenizer, [good, good]) == {"valid <tool_call>": 2, "integer answer": 2, "no extra text": 2}
    assert "valid <tool_call>           2/2" in capsys.readouterr().out
    assert check_rows(tokenizer, [worked], shows_work=True)["working ends in the answer"] == 1
    with pytest.raises(ValueError, match="fix the data before training: working ends in the answer"):
        check_rows(tokenizer, [worked, row("1 + 2 = 4.", "3")], shows_work=True)
    with pytest.raises(ValueError, match="fix the data before training: integer answer"):
        check_rows(tokenizer, [row("", "three")])
    other = SimpleNamespace(chat_template="{{ messages }}")
    with pytest.raises(ValueError, match="qwen3 chat template"):
        check_rows(other, [good])


def test_load_student_checks_memory_loads_and_picks_the_precision(capsys):
    from helpers.model_folders import resolve_model
    from helpers.profiles import resolve_settings

    settings = resolve_settings("02_sft_warmup", "tiny", precision="fp32", quiet=True)
    with pytest.raises(ValueError, match="seq_len"):
        load_student("02_sft_warmup", settings, resolve_model("tiny"), seq_len=0)
    model, precision = load_student("02_sft_warmup", settings, resolve_model("tiny"), seq_len=64, seed=0)
    assert precision.precision == "fp32" and next(model.parameters()).requires_grad
    out = capsys.readouterr().out
    assert "tiny on " in out and "student: tiny (" in out and "M parameters)" in out
