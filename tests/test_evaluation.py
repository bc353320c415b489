"""helpers.chain_sum.evaluation: the held-out evaluation scores real replies through the real environment."""

import contextlib
import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from helpers.chain_sum.evaluation import evaluate_policy
from helpers.model_folders import resolve_model
from helpers.reporting.intervals import paired_change

ONE_DIGIT = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


@pytest.fixture(scope="module")
def tiny_toolcall():
    path = resolve_model("tiny-toolcall")
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


@contextlib.contextmanager
def output_dtypes(model):
    """The dtypes of the output layer's results while the block runs: what precision generation used."""
    seen = set()
    hook = model.lm_head.register_forward_hook(lambda module, args, out: seen.add(out.dtype))
    try:
        yield seen
    finally:
        hook.remove()


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_evaluation_generates_in_the_precision_asked_and_the_env_scores_it(rg_server, tiny_toolcall, precision):
    """precision="bf16" must run the forward passes in bf16 (the trainer's precision), "fp32" in fp32."""
    model, tokenizer = tiny_toolcall
    with output_dtypes(model) as seen:
        result = evaluate_policy(model, tokenizer, rg_server.base_url, dataset_config=ONE_DIGIT, n=6,
                                 max_new_tokens=40, precision=precision, progress=False)
    assert seen == {torch.bfloat16 if precision == "bf16" else torch.float32}
    assert result.n == 6 and len(result.samples) == 6
    # tiny-toolcall learned the call format: every reply is a call, and the environment scored each one
    assert result.format_compliance == 1.0
    assert all(s["correct_answer"] is not None and 0.0 <= s["score"] <= 1.0 for s in result.samples)
    assert result.exact <= result.accuracy <= result.format_compliance
    assert next(model.parameters()).dtype == torch.float32   # autocast: the weights stay fp32


def test_no_precision_leaves_an_outer_autocast_on(rg_server, tiny_toolcall):
    """precision=None means "as the caller set it", not "force fp32": a caller's own autocast stays in force."""
    model, tokenizer = tiny_toolcall
    with output_dtypes(model) as seen, torch.autocast("cpu", dtype=torch.bfloat16):
        evaluate_policy(model, tokenizer, rg_server.base_url, dataset_config=ONE_DIGIT, n=2, max_new_tokens=8,
                        progress=False)
    assert seen == {torch.bfloat16}


def test_paired_change_compares_the_same_questions(rg_server, tiny_toolcall):
    model, tokenizer = tiny_toolcall
    before = evaluate_policy(model, tokenizer, rg_server.base_url, dataset_config=ONE_DIGIT, n=8,
                             max_new_tokens=40, progress=False)
    again = evaluate_policy(model, tokenizer, rg_server.base_url, dataset_config=ONE_DIGIT, n=8,
                            max_new_tokens=40, progress=False)
    same = paired_change(before, again)   # greedy and the same seed: the same questions, the same scores
    assert (same.n, same.change, same.gained, same.lost, same.ci) == (8, 0.0, 0, 0, (0.0, 0.0))

    # an "after" where two questions flipped to right and one to wrong
    after = copy.deepcopy(before)
    for sample, score in zip(after.samples, [1.0, 1.0, 0.0]):
        sample["score"] = score if sample["score"] != score else 1.0 - score
    flipped = [a["score"] - b["score"] for b, a in zip(before.samples, after.samples)]
    change = paired_change(before, after)
    assert change.gained == sum(d > 0 for d in flipped) and change.lost == sum(d < 0 for d in flipped)
    assert change.change == pytest.approx(sum(flipped) / 8)
    assert change.ci[0] < change.change < change.ci[1]
    assert "same 8 questions" in str(change)
    # partial credit: a sign-flipped answer scores 0.67 with reasoning_gym; exactly right counts it as wrong
    partial = copy.deepcopy(before)
    partial.samples[0]["score"] = 2 / 3
    was_right = before.samples[0]["score"] == 1.0
    assert paired_change(before, partial).change == pytest.approx((2 / 3 - before.samples[0]["score"]) / 8)
    exact = paired_change(before, partial, exact=True)
    assert exact.change == pytest.approx(-1 / 8 if was_right else 0.0) and exact.lost == int(was_right)
    assert str(exact).startswith("exactly right ")

    other = evaluate_policy(model, tokenizer, rg_server.base_url, dataset_config=ONE_DIGIT, n=8, seed=1,
                            max_new_tokens=40, progress=False)
    with pytest.raises(ValueError, match="same seed"):
        paired_change(before, other)


def test_change_by_kind_splits_the_paired_change_by_kind_of_question():
    """Rows per kind of real chain_sum question; exact answers (1.0) only, so partial credit counts as wrong."""
    import reasoning_gym

    from helpers.chain_sum.evaluation import EvalResult, change_by_kind
    from helpers.chain_sum.local_teacher import working_kind

    questions = [e["question"] for e in reasoning_gym.create_dataset(
        "chain_sum", seed=5, size=60, min_terms=2, max_terms=2, min_digits=2, max_digits=2)]
    def result(scores):
        return EvalResult(n=len(scores), format_compliance=1.0, accuracy=sum(scores) / len(scores),
                          format_ci=(0.0, 1.0), accuracy_ci=(0.0, 1.0),
                          samples=[{"question": q, "score": s} for q, s in zip(questions, scores)])
    before = result([1.0 if i % 3 == 0 else 0.0 for i in range(60)])
    after = result([1.0 if i % 2 == 0 else (0.5 if i % 5 == 0 else 0.0) for i in range(60)])
    rows = change_by_kind(before, after, working_kind)

    assert [row.n for row in rows] == sorted((row.n for row in rows), reverse=True) and sum(r.n for r in rows) == 60
    for row in rows:
        pairs = [(b["score"], a["score"]) for b, a in zip(before.samples, after.samples)
                 if working_kind(b["question"]) == row.kind]
        assert row.n == len(pairs)
        assert row.before == sum(b == 1.0 for b, _ in pairs) / row.n and row.after == sum(a == 1.0 for _, a in pairs) / row.n
        assert row.gained == sum(b < 1.0 == a for b, a in pairs) and row.lost == sum(b == 1.0 > a for b, a in pairs)
    assert sum(row.gained for row in rows) == 20 and sum(row.lost for row in rows) == 10   # i%6 in {2,4} gained, i%6==3 lost
    assert str(rows).splitlines()[0].split() == ["kind", "n", "before", "after", "gained", "lost"]
    assert rows.records()[0] == {"kind": rows[0].kind, "n": rows[0].n, "before": rows[0].before,
                                 "after": rows[0].after, "gained": rows[0].gained, "lost": rows[0].lost}
    shuffled = copy.deepcopy(before)
    shuffled.samples.reverse()
    with pytest.raises(ValueError, match="same questions"):
        change_by_kind(before, shuffled, working_kind)


def test_one_tool_call_parser_for_both_evaluations():
    from helpers.chain_sum.evaluation import parse_answer_call
    from helpers.rollouts.tool_calls import parse_tool_calls

    text = ('I add. <tool_call>\n{"name": "calculate", "arguments": "{\\"expression\\": \\"1+2\\"}"}\n</tool_call>'
            '<tool_call>{"name": "answer", "arguments": {"answer": 3}}</tool_call><tool_call>{broken}</tool_call>')
    assert parse_tool_calls(text) == [{"name": "calculate", "arguments": {"expression": "1+2"}},
                                      {"name": "answer", "arguments": {"answer": 3}}]
    assert parse_answer_call(text) is None   # the first call is not `answer`
    assert parse_answer_call('<tool_call>{"name": "answer", "arguments": {"answer": -7}}</tool_call>') == "-7"
    assert parse_answer_call('<tool_call>{"name": "answer", "arguments": {}}</tool_call>') is None
    assert parse_answer_call("86") is None


def test_record_run_builds_the_metrics_the_notebook_tests_read(tmp_path, monkeypatch):
    import json
    from types import SimpleNamespace

    from helpers.chain_sum.evaluation import EvalResult
    from helpers.reporting.metrics import record_run

    def result(scores):
        samples = [{"question": f"q{i}", "score": s} for i, s in enumerate(scores)]
        acc = sum(scores) / len(scores)
        return EvalResult(n=len(scores), format_compliance=1.0, accuracy=acc, format_ci=(0.5, 1.0),
                          accuracy_ci=(0.0, 1.0), exact=acc, exact_ci=(0.0, 1.0), samples=samples)

    monkeypatch.setenv("AGENT_RL_RUNS", str(tmp_path))
    path = record_run("nb", SimpleNamespace(profile="tiny", model="m"), before=result([0, 1, 0, 0]),
                      after=result([1, 1, 0, 1]), extra_key=3)
    metrics = json.loads(path.read_text())
    assert metrics["profile"] == "tiny" and metrics["extra_key"] == 3 and metrics["eval_n"] == 4
    assert metrics["accuracy_before"] == 0.25 and metrics["accuracy_after"] == 0.75
    assert metrics["accuracy_change"] == 0.5 and (metrics["questions_gained"], metrics["questions_lost"]) == (2, 0)
    assert {"format_ci_before", "exact_ci_after", "accuracy_change_ci"} <= set(metrics)
    # a run whose budget stopped it before it trained evaluated nothing after: recorded as None, replacing the run above's
    stopped = SimpleNamespace(too_few_steps="STOPPED after 3 steps", summary=lambda: {"steps_run": 3})
    metrics = json.loads(record_run("nb", SimpleNamespace(profile="tiny", model="m"), before=result([0, 1, 0, 0]),
                                    after=result([0, 1, 0, 0]), budget=stopped).read_text())
    assert metrics["accuracy_before"] == 0.25 and metrics["eval_n"] == 4 and metrics["steps_run"] == 3
    not_measured = {key for key in metrics if key.endswith("_after") or "change" in key or "questions_" in key}
    assert {"accuracy_after", "eval_seconds_after", "accuracy_change_ci", "questions_gained"} <= not_measured
    assert all(metrics[key] is None for key in not_measured)
