"""The local OpenAI-compatible teacher: exact chain_sum answers, seeded mistakes, the OpenAI wire format."""

from __future__ import annotations

import asyncio
import json

import pytest

from helpers.servers import LocalServer
from helpers.chain_sum.local_teacher import TeacherPolicy, solve_chain_sum


def chain_sum_entries(n=200, seed=7, **config):
    import reasoning_gym

    config = {"min_terms": 2, "max_terms": 4, "min_digits": 1, "max_digits": 3, **config}
    return list(reasoning_gym.create_dataset("chain_sum", seed=seed, size=n, **config))


def test_solves_real_chain_sum_questions_exactly():
    entries = chain_sum_entries() + chain_sum_entries(n=100, seed=3, allow_negation=True)
    assert any(" - -" in e["question"] for e in entries)  # negative terms are covered
    for entry in entries:
        assert str(solve_chain_sum(entry["question"])) == entry["answer"], entry["question"]


@pytest.mark.parametrize("text", ["What is 3 * 4 =", "x 1 * 2 =", "import os; 1 + 1 =", "hello", "", "1 + = 2"])
def test_refuses_what_is_not_a_sum(text):
    assert solve_chain_sum(text) is None


def test_mistakes_are_seeded_wrong_and_near_the_rate():
    questions = [e["question"] for e in chain_sum_entries(n=600, seed=11)]
    policy = TeacherPolicy(mistake_rate=0.3, seed=5)
    decisions = [policy.decide(q) for q in questions]
    assert decisions == [TeacherPolicy(mistake_rate=0.3, seed=5).decide(q) for q in questions]  # reproducible
    mistakes = [(q, d) for q, d in zip(questions, decisions) if d["kind"] == "mistake"]
    assert 0.22 < len(mistakes) / len(questions) < 0.38
    assert all(d["value"] != solve_chain_sum(q) for q, d in mistakes)
    assert all(d["value"] == solve_chain_sum(q) for q, d in zip(questions, decisions) if d["kind"] == "answer")
    other_seed = [TeacherPolicy(mistake_rate=0.3, seed=6).decide(q)["kind"] for q in questions]
    assert other_seed != [d["kind"] for d in decisions]
    assert all(TeacherPolicy(mistake_rate=0.0).decide(q)["kind"] == "answer" for q in questions)


def test_bad_rates_are_refused():
    with pytest.raises(ValueError, match="mistake_rate"):
        TeacherPolicy(mistake_rate=1.5)
    with pytest.raises(ValueError, match="no_tool_rate"):
        TeacherPolicy(no_tool_rate=-0.1)


ANSWER_TOOL = {"type": "function", "function": {
    "name": "answer", "description": "Submit the final answer.",
    "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}}


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    with LocalServer("helpers.chain_sum.local_teacher:create_app", factory=True, name="teacher",
                     env={"TEACHER_MISTAKE_RATE": "0", "TEACHER_MODEL": "t1"},
                     log_dir=tmp_path_factory.mktemp("teacher")) as server:
        yield server


def test_openai_sdk_gets_a_tool_call_with_json_string_arguments(teacher):
    import openai

    client = openai.OpenAI(base_url=teacher.base_url + "/v1", api_key="not-needed")
    assert [m.id for m in client.models.list()] == ["t1"]
    for entry in chain_sum_entries(n=5, seed=1):
        reply = client.chat.completions.create(
            model="t1", tools=[ANSWER_TOOL],
            messages=[{"role": "system", "content": "be careful"}, {"role": "user", "content": entry["question"]}])
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls"
        call = choice.message.tool_calls[0]
        assert call.type == "function" and call.function.name == "answer"
        assert isinstance(call.function.arguments, str)
        assert json.loads(call.function.arguments) == {"answer": entry["answer"]}


def test_openenv_llm_client_parses_the_reply(teacher):
    """The exact client `openenv collect --llm-endpoint` builds."""
    from openenv.core.llm_client import OpenAIClient

    client = OpenAIClient(teacher.base_url, None, "t1", system_prompt="be careful")
    tools = [{"name": "answer", "description": "d", "inputSchema": ANSWER_TOOL["function"]["parameters"]}]
    question = "State the final answer to the following arithmetic problem: 40 + 2 - 7 ="
    response = asyncio.run(client.complete_with_tools([{"role": "user", "content": question}], tools))
    assert [(c.name, c.args) for c in response.tool_calls] == [("answer", {"answer": "35"})]


def test_no_tool_replies_and_bad_requests(tmp_path):
    import httpx
    import openai

    with LocalServer("helpers.chain_sum.local_teacher:create_app", factory=True, name="teacher", log_dir=tmp_path,
                     env={"TEACHER_NO_TOOL_RATE": "1.0"}) as server:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x")
        reply = client.chat.completions.create(model="m", tools=[ANSWER_TOOL], messages=[
            {"role": "user", "content": "State the final answer to the following arithmetic problem: 1 + 2 ="}])
        assert reply.choices[0].message.tool_calls is None
        assert reply.choices[0].message.content == "The answer is 3."
        streamed = httpx.post(server.base_url + "/v1/chat/completions", json={
            "model": "m", "stream": True, "messages": [{"role": "user", "content": "1 + 2 ="}]})
        assert streamed.status_code == 400 and "does not stream" in streamed.text
        assert httpx.post(server.base_url + "/v1/chat/completions", json={"model": "m"}).status_code == 400


def test_worked_solution_is_true_arithmetic_ending_in_the_answer():
    import re

    from helpers.chain_sum.local_teacher import worked_solution

    entries = chain_sum_entries() + chain_sum_entries(n=100, seed=3, allow_negation=True)
    for entry in entries:
        work = worked_solution(entry["question"])
        assert work.endswith(f"= {entry['answer']}."), (entry["question"], work)
        # every equation in the working holds: "7 + 8 = 15", "12 - 8 = 4", "7 - 1 - 3 = 3", "-41 + 30 = -11"
        equations = re.findall(r"(-?\d+(?: [+-] -?\d+)+) = (-?\d+)(?=[.,;]|$)", work, re.M)
        assert len(equations) >= 2
        for left, right in equations:
            assert solve_chain_sum(left + " =") == int(right), (left, right, work)
    assert worked_solution("What is 3 * 4 =") is None


def test_working_kind_names_the_column_work_of_real_questions():
    """Checked against the arithmetic itself on notebook 01's sums (two 2-digit terms): a carry when the ones
    digits reach 10, a borrow when the larger number's ones digit is the smaller, negative when a < b."""
    import re

    from helpers.chain_sum.local_teacher import working_kind

    seen = set()
    for entry in chain_sum_entries(n=300, seed=11, max_terms=2, min_digits=2, max_digits=2):
        a, op, b = re.search(r"(\d+) ([+-]) (\d+) =", entry["question"]).groups()
        a, b = int(a), int(b)
        if op == "+":
            expected = "addition, " + ("carry" if a % 10 + b % 10 >= 10 else "no carry")
        else:
            big, small = max(a, b), min(a, b)
            expected = "subtraction, " + ("borrow" if big % 10 < small % 10 else "no borrow")
            expected += ", negative result" if a < b else ""
        assert working_kind(entry["question"]) == expected, entry["question"]
        seen.add(expected)
    assert len(seen) == 6   # every kind the 2-term sums have turned up
    three_terms = "State the final answer to the following arithmetic problem: 12 + 34 - 50 ="
    assert working_kind(three_terms) == "addition and subtraction, no carry, borrow, negative result"
    assert working_kind("What is 3 * 4 =") == working_kind("Problem: 7 =") == "not a chain sum"


def test_show_work_puts_the_working_before_the_tool_call(tmp_path):
    import openai

    with LocalServer("helpers.chain_sum.local_teacher:create_app", factory=True, name="teacher", log_dir=tmp_path,
                     env={"TEACHER_MISTAKE_RATE": "0", "TEACHER_SHOW_WORK": "1"}) as server:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x")
        reply = client.chat.completions.create(model="m", tools=[ANSWER_TOOL], messages=[
            {"role": "user", "content": "State the final answer to the following arithmetic problem: 47 + 38 ="}])
    message = reply.choices[0].message
    assert message.content == "47 + 38: ones 7 + 8 = 15, carry 1; tens 4 + 3 + 1 = 8. 47 + 38 = 85."
    assert json.loads(message.tool_calls[0].function.arguments) == {"answer": "85"}


def test_start_local_serves_the_stand_in_with_its_knobs_and_a_teacher_pointing_at_it():
    """Teacher.start_local (notebooks 02 and 04): the knobs reach the server (show_work=True writes the working,
    mistake_rate=0 answers right), the Teacher names the model and URL, and the probe sees the tool call."""
    from helpers.prompts import SYSTEM_PROMPT
    from helpers.chain_sum.sft_data import Teacher, check_teacher

    teacher, server = Teacher.start_local("chain-sum-teacher", mistake_rate=0.0, seed=3, show_work=True)
    try:
        assert (teacher.model, teacher.url) == ("chain-sum-teacher", server.base_url)
        probe = check_teacher(teacher, system_prompt=SYSTEM_PROMPT, max_tokens=256,
                              question="State the final answer to the following arithmetic problem: 47 + 38 =")
        assert probe["tool_calls"] == [{"name": "answer", "arguments": {"answer": "85"}}]
        assert "carry 1" in str(probe)   # the working, written before the call
    finally:
        server.stop()
