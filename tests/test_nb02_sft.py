"""Notebook 02 (SFT warm-up): the notebook's own `openenv collect` command (its cell tagged collect-command) run
for real against the local teacher and env server, its conversion and reward filter (cells to-sft-rows and
reward-filter), the early errors, and the tiny notebook run end to end."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.chain_sum.evaluation import parse_answer_call
from helpers.prompts import CHAIN_SUM_CONFIG, SYSTEM_PROMPT
from helpers.servers import LocalServer, free_port
from helpers.chain_sum.sft_data import (
    NoExamplesError,
    Teacher,
    TeacherError,
    check_teacher,
    length_stats,
    load_results,
    render,
    require_examples,
    rollouts_folder,
    run_collect,
    token_lengths,
)
from tools.notebooks import NOTEBOOKS_DIR, load_cells

from eval_checks import assert_before_after_metrics, assert_precision_recorded

NB = "02_sft_warmup"
NB_PATH = NOTEBOOKS_DIR / f"{NB}.ipynb"


def notebook_collect_command(env_url: str, out, n: int, teacher: Teacher, push_to: str | None = None) -> list[str]:
    """The notebook's `openenv collect` command line (its cell tagged collect-command), filled with these values."""
    names = load_cells(NB_PATH, "collect-command", namespace=dict(
        env_url=env_url, teacher=teacher, settings=SimpleNamespace(n_episodes=n, dataset_config=CHAIN_SUM_CONFIG),
        TEACHER_MAX_TOKENS=1024, SYSTEM_PROMPT=SYSTEM_PROMPT, rollouts_dir=out, PUSH_TO_HUB=push_to is not None,
        HUB_DATASET_ID=push_to))
    return names["collect_cmd"]


def notebook_rows(records: list[dict], keep_work: bool = False) -> dict:
    """The notebook's conversion and reward filter (cells to-sft-rows and reward-filter) run on `records`:
    the namespace with its `examples`, `kept`, `to_sft_example` and `keep_correct`."""
    return load_cells(NB_PATH, "to-sft-rows", "reward-filter", namespace=dict(
        records=records, SYSTEM_PROMPT=SYSTEM_PROMPT, settings=SimpleNamespace(teacher_shows_work=keep_work)))


def teacher_counts(server) -> dict:
    with urllib.request.urlopen(server.base_url + "/health") as resp:
        return json.loads(resp.read())["replies"]


@pytest.fixture(scope="module")
def collected(rg_server, tmp_path_factory):
    """16 episodes collected by the real CLI from a teacher that errs often, then 4 more with --resume."""
    out = tmp_path_factory.mktemp("rollouts")
    with LocalServer("helpers.chain_sum.local_teacher:create_app", factory=True, name="teacher", log_dir=out,
                     env={"TEACHER_MISTAKE_RATE": "0.4", "TEACHER_NO_TOOL_RATE": "0.2", "TEACHER_SEED": "1"}) as t:
        teacher = Teacher.endpoint(t.base_url, "chain-sum-teacher")

        def collect(n):
            cmd = notebook_collect_command(rg_server.base_url, out, n, teacher)
            return run_collect(cmd, out, n_episodes=n, progress=False)

        first = collect(16)
        first_counts = teacher_counts(t)
        first_lines = (out / "results.jsonl").read_text().splitlines()
        second = collect(20)
        yield {"dir": out, "first": first, "first_counts": first_counts, "first_lines": first_lines,
               "second": second, "counts": teacher_counts(t)}


def test_cli_collects_scored_episodes(collected):
    first, counts = collected["first"], collected["first_counts"]
    assert first.collected + first.failed == 16 and first.in_file == first.collected
    # every teacher reply without a tool call is an episode the CLI could not score
    assert first.failed == counts["no_tool"]
    records = [json.loads(line) for line in collected["first_lines"]]
    assert [r["episode_id"] for r in records] == sorted(r["episode_id"] for r in records)
    for record in records:
        user, assistant, tool = record["messages"]
        assert user["role"] == "user" and "arithmetic problem" in user["content"]
        arguments = assistant["tool_calls"][0]["function"]["arguments"]
        assert isinstance(arguments, str)  # OpenAI format: a JSON string
        given = json.loads(arguments)["answer"]
        # the reward is the environment's verdict on the teacher's answer
        assert record["reward"] == (1.0 if given == record["artifacts"]["correct_answer"] else 0.0)
        assert json.loads(tool["content"])["score"] == record["reward"]
    assert sum(r["reward"] < 1 for r in records) == counts["mistake"] > 0


def test_resume_keeps_and_extends(collected):
    second, first_lines = collected["second"], collected["first_lines"]
    lines = (collected["dir"] / "results.jsonl").read_text().splitlines()
    assert lines[:len(first_lines)] == first_lines  # nothing rewritten
    assert second.skipped == len(first_lines)
    assert second.collected + second.failed == 20 - second.skipped  # failed ids are retried too
    ids = [json.loads(line)["episode_id"] for line in lines]
    assert len(ids) == len(set(ids)) == second.in_file


def test_filter_keeps_only_correct_in_trainer_layout(collected):
    from datasets import Dataset
    from transformers import AutoTokenizer

    from helpers.model_folders import resolve_model

    records = load_results(collected["dir"])
    cells = notebook_rows(records)
    examples, kept = cells["examples"], cells["kept"]
    assert len(kept) == sum(r["reward"] == 1.0 for r in records)
    assert len(kept) < len(examples)  # the teacher's mistakes were filtered out
    truth = {r["episode_id"]: r["artifacts"]["correct_answer"] for r in records}
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("tiny"))
    for example in kept:
        system, user, assistant = example["messages"]
        assert system == {"role": "system", "content": SYSTEM_PROMPT} and user["role"] == "user"
        assert isinstance(assistant["tool_calls"][0]["function"]["arguments"], str)
        text = render(tokenizer, example)
        assert '<tool_call>\n{"name": "answer", "arguments": {"answer": "' in text
        assert parse_answer_call(text.split("<|im_start|>assistant")[-1]) == truth[example["episode_id"]]
        assert '"name": "answer"' in text.split("<tools>\n")[1].split("</tools>")[0]  # the tool is in the prompt
    dataset = Dataset.from_list([{"messages": e["messages"], "tools": e["tools"]} for e in kept])  # as the SFT cell
    # Arrow accepts it: arguments are strings
    assert dataset.column_names == ["messages", "tools"]
    stats = length_stats(token_lengths(tokenizer, kept))
    assert 0 < stats["p50"] <= stats["p95"] <= stats["p99"] <= stats["max"]


def test_teacher_working_survives_the_cli_and_lands_before_the_call(rg_server, tmp_path):
    """TEACHER_SHOW_WORK: `openenv collect` records the working, the notebook's keep_work puts it in the SFT row."""
    from transformers import AutoTokenizer

    from helpers.model_folders import resolve_model

    with LocalServer("helpers.chain_sum.local_teacher:create_app", factory=True, name="teacher", log_dir=tmp_path,
                     env={"TEACHER_MISTAKE_RATE": "0", "TEACHER_SHOW_WORK": "1"}) as t:
        cmd = notebook_collect_command(rg_server.base_url, tmp_path / "r", 4,
                                       Teacher.endpoint(t.base_url, "chain-sum-teacher"))
        run_collect(cmd, tmp_path / "r", n_episodes=4, progress=False)
    records = load_results(tmp_path / "r")
    to_sft_example = notebook_rows(records, keep_work=True)["to_sft_example"]
    assert len(records) == 4 and all(r["reward"] == 1.0 for r in records)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("tiny"))
    for record in records:
        answer = record["artifacts"]["correct_answer"]
        with_work = to_sft_example(record, SYSTEM_PROMPT, keep_work=True)
        work = with_work["messages"][2]["content"]
        assert work.endswith(f"= {answer}.") and "ones" in work
        reply = render(tokenizer, with_work).split("<|im_start|>assistant\n")[-1]
        assert reply.index(work) < reply.index("<tool_call>")  # the working, then the call
        assert parse_answer_call(reply) == answer
        assert to_sft_example(record, SYSTEM_PROMPT)["messages"][2]["content"] == ""  # default: dropped


def test_collect_command_flags_exist_in_the_installed_cli(tmp_path):
    """Every flag of the notebook's command, for each kind of teacher and with the Hub upload, is one the installed
    `openenv collect` knows (the runs above exercise only the local teacher's flags)."""
    from helpers.chain_sum.sft_data import openenv_executable, shell_line

    helptext = subprocess.run([openenv_executable(), "collect", "--help"], capture_output=True, text=True,
                              env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}, timeout=120).stdout
    commands = [notebook_collect_command("http://127.0.0.1:1", tmp_path, 3, Teacher.openai("gpt-5-mini"), "me/rows"),
                notebook_collect_command("http://127.0.0.1:1", tmp_path, 3, Teacher.endpoint("http://h", "m", 8001))]
    assert commands[0][commands[0].index("--provider"):][:4] == ["--provider", "openai", "--model", "gpt-5-mini"]
    assert commands[0][-2:] == ["--push-to-hub", "me/rows"] and "--push-to-hub" not in commands[1]
    assert commands[1][commands[1].index("--llm-endpoint"):][:6] == [
        "--llm-endpoint", "http://h", "--model", "m", "--llm-port", "8001"]
    for cmd in commands:
        assert cmd[1:3] == ["collect", "reasoning_gym:chain_sum"]
        for flag in (arg for arg in cmd if arg.startswith("--")):
            assert f" {flag} " in helptext, flag
        assert json.loads(cmd[cmd.index("--dataset-config") + 1]) == CHAIN_SUM_CONFIG
        assert cmd[cmd.index("--system-prompt") + 1] == SYSTEM_PROMPT
        assert shell_line(cmd).startswith("openenv collect reasoning_gym:chain_sum --base-url")
        assert '--system-prompt "$SYSTEM_PROMPT"' in shell_line(cmd)


def test_filter_keeps_reward_one_with_a_call():
    """The notebook's keep_correct: reward 1 and an answer call; a reward-1 episode without a call is not a row."""
    call = {"role": "assistant", "content": "",
            "tool_calls": [{"function": {"name": "answer", "arguments": '{"answer": "3"}'}}]}
    records = [{"episode_id": "a", "messages": [{"role": "user", "content": "1 + 2 ="}, call], "reward": 1.0},
               {"episode_id": "b", "messages": [{"role": "user", "content": "1 + 1 ="}, call], "reward": 0.0},
               {"episode_id": "c", "messages": [{"role": "user", "content": "2 + 2 ="},
                                                {"role": "assistant", "content": "4"}], "reward": 1.0}]
    cells = notebook_rows(records)
    assert [e["episode_id"] for e in cells["kept"]] == ["a"] and cells["examples"][2]["messages"] is None
    assert [e["episode_id"] for e in cells["keep_correct"](cells["examples"], threshold=0.0)] == ["a", "b"]


def test_teacher_down_is_a_clear_error_naming_the_url(monkeypatch):
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TeacherError, match=f"No teacher answers at {url}"):
        check_teacher(Teacher.endpoint(url, "m"), system_prompt=SYSTEM_PROMPT, question="1 + 1 =")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("API_KEY", raising=False)
    with pytest.raises(TeacherError, match="OPENAI_API_KEY"):
        check_teacher(Teacher.openai("gpt-5-mini"), system_prompt=SYSTEM_PROMPT, question="1 + 1 =")


def test_zero_kept_is_a_clear_error():
    with pytest.raises(NoExamplesError, match="TEACHER_MISTAKE_RATE"):
        require_examples([], collected=10, failed=2)


def test_notebook_tiny(notebook_runner):
    from transformers import AutoTokenizer

    from helpers.model_folders import trl_qwen3_chat_template
    from tools.notebooks import cell_outputs_text

    metrics, executed = notebook_runner(NB)
    assert metrics["profile"] == "tiny" and metrics["teacher_kind"] == "local"
    n = metrics["episodes_requested"]
    assert metrics["episodes_collected"] + metrics["episodes_failed"] == n
    assert metrics["episodes_kept"] + metrics["episodes_wrong"] == metrics["episodes_collected"]
    # the questions are drawn at random per episode (upstream `openenv collect` passes no seed), so how many of the
    # teacher's seeded mistakes land in 12 episodes varies (none ~4 % of runs): the filter is checked against the
    # saved rewards below, not against a count
    assert 1 <= metrics["episodes_kept"] <= n
    assert metrics["length_p50"] <= metrics["length_p95"] <= metrics["length_p99"] < metrics["max_length"]
    assert metrics["kept_rewards"] and all(r == 1.0 for r in metrics["kept_rewards"])   # the filter kept reward 1 only
    assert metrics["sft_steps"] >= 1 and metrics["sft_seconds"] > 0
    # tiny's student is a random network over Qwen3's 151,669 tokens and trains ~4 steps at lr 1e-4: its loss does
    # not reliably fall (seen: 11.928 -> 11.930), so "it falls" would be a coin toss. What must hold: every logged
    # loss is the cross-entropy of a near-uniform guess, ln(vocabulary) ~ 11.93, on the assistant tokens only
    # (a masking bug gives 0 or NaN; a wrong vocabulary or template gives another value)
    import math

    losses = metrics["sft_losses"]
    assert len(losses) == metrics["sft_steps"] and metrics["sft_loss_first"] == losses[0]
    assert all(abs(loss - math.log(151_669)) < 0.5 for loss in losses), losses
    assert_before_after_metrics(metrics)
    # a step budget: every planned step ran, and the estimate after two steps was printed and recorded
    assert metrics["steps_run"] == metrics["sft_steps"] == metrics["steps_planned"] == metrics["sft_max_steps"]
    assert metrics["stopped_by_time_budget"] is False and metrics["seconds_per_step"] > 0
    text = cell_outputs_text(executed)
    # from the second step on, the estimate says when the evaluation after training ends (the one before was timed)
    assert metrics["eval_seconds_before"] > 0
    assert ("then the evaluation after training: about" in text) == (metrics["steps_run"] >= 2)
    assert "PAD/BOS/EOS" not in text   # load_policy aligned the special tokens: SFTTrainer has nothing to warn about
    assert_precision_recorded(metrics, text)
    checkpoint = Path(metrics["checkpoint"])
    assert (checkpoint / "config.json").exists() and checkpoint.parent.name == NB
    assert AutoTokenizer.from_pretrained(checkpoint).chat_template == trl_qwen3_chat_template()
    assert (checkpoint.parent / "sft_loss.png").exists() and (checkpoint.parent / "before_after.png").exists()
    assert "openenv collect reasoning_gym:chain_sum" in text and "Collected=" in text
    # the episodes sit in the folder of their difficulty and teacher, and carry the teacher's working
    assert metrics["teacher_shows_work"] is True
    records = load_results(rollouts_folder(checkpoint.parent, "chain_sum", metrics["dataset_config"],
                                           teacher="chain-sum-teacher-worked"))
    assert len(records) == metrics["episodes_collected"]
    assert sum(r["reward"] == 1.0 for r in records) == metrics["episodes_kept"]   # kept: exactly the reward-1 episodes
    assert sum(r["reward"] != 1.0 for r in records) == metrics["episodes_wrong"]
    assert all(r["messages"][1]["content"].endswith(".") for r in records)  # "... 47 + 38 = 85."
    assert "working ends in the answer" in text
    # rollouts shown whole (helpers.reporting.show): a collected teacher episode (its tool call, the environment's reply,
    # the reward), then the student's held-out replies before and after SFT, each on its own lines however blank
    assert "tool call │ answer(answer=" in text and "env reply │ " in text and "reward    │ +" in text
    assert text.count("prompt    │ State the final answer") >= 1 + min(3, metrics["eval_n"]) + 1
    assert "\n\n\n\n" not in text.replace("\r", "")


def test_each_difficulty_collects_into_its_own_folder(tmp_path):
    two = {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2}
    same_reordered = {"max_digits": 2, "min_digits": 2, "max_terms": 2, "min_terms": 2}
    assert rollouts_folder(tmp_path, "chain_sum", two) == rollouts_folder(tmp_path, "chain_sum", same_reordered)
    assert rollouts_folder(tmp_path, "chain_sum", two) != rollouts_folder(tmp_path, "chain_sum", CHAIN_SUM_CONFIG)
    assert rollouts_folder(tmp_path, "chain_sum", two).parent == tmp_path / "rollouts"
    worked = rollouts_folder(tmp_path, "chain_sum", two, teacher="chain-sum-teacher-worked")
    assert worked != rollouts_folder(tmp_path, "chain_sum", two, teacher="chain-sum-teacher")


def test_notebook_stops_before_collecting_when_the_teacher_is_down(notebook_runner, tmp_path):
    from papermill.exceptions import PapermillExecutionError

    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(PapermillExecutionError, match=f"No teacher answers at {url}"):
        notebook_runner(NB, LLM_ENDPOINT=url, TEACHER_MODEL="m")
    assert not list((tmp_path / "runs").rglob("results.jsonl"))


def test_notebook_stops_before_sft_when_nothing_is_kept(notebook_runner, tmp_path):
    from papermill.exceptions import PapermillExecutionError

    with pytest.raises(PapermillExecutionError, match="NoExamplesError"):
        notebook_runner(NB, N_EPISODES=6, TEACHER_MISTAKE_RATE=1.0)
    assert list((tmp_path / "runs").rglob("results.jsonl"))  # it collected, then refused to train
    assert not list((tmp_path / "runs").rglob("checkpoint"))

