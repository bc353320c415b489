"""calculator_env: its task list, its safe calculator, and its tools graded over a real ORS server."""

from __future__ import annotations

import os

import pytest

from calculator_env import SPLIT_SIZES, make_task, safe_eval, true_answer
from calculator_env.tasks import parse_integer
from helpers.openreward.local import LocalORSServer, open_ors_target, sdk_pointed_at
from helpers.servers import ServerError


def test_tasks_are_deterministic_disjoint_and_carry_no_answer():
    assert make_task("train", 7) == make_task("train", 7)
    train = {make_task("train", i)["expression"] for i in range(SPLIT_SIZES["train"])}
    test = {make_task("test", i)["expression"] for i in range(SPLIT_SIZES["test"])}
    assert len(train) == SPLIT_SIZES["train"] and len(test) == SPLIT_SIZES["test"]
    assert not train & test
    spec = make_task("test", 4)
    assert set(spec) == {"id", "difficulty", "expression"}
    assert [make_task("train", i)["difficulty"] for i in range(3)] == ["easy", "medium", "hard"]
    with pytest.raises(IndexError):
        make_task("test", SPLIT_SIZES["test"])


def test_safe_eval_computes_arithmetic_and_refuses_anything_else():
    assert safe_eval("39 * 76 - 27") == 2937
    assert safe_eval("(10 + 2) / 4") == 3 and isinstance(safe_eval("(10 + 2) / 4"), int)
    assert safe_eval("-7 + 2") == -5
    for bad in ("__import__('os')", "2 ** 100000", "x + 1", "1 / 0", "[1, 2]", "1 +", "9" * 300):
        with pytest.raises(ValueError):
            safe_eval(bad)
    assert parse_integer(" 873 ") == 873 and parse_integer("873.0") == 873 and parse_integer("-5") == -5
    assert parse_integer("873.5") is None and parse_integer("<answer>873</answer>") is None


@pytest.fixture(scope="module")
def ors(tmp_path_factory):
    with LocalORSServer("calculator_env.server:app", log_dir=tmp_path_factory.mktemp("ors-logs")) as server:
        yield server


@pytest.fixture(scope="module")
def sdk_env(ors):
    from openreward import OpenReward

    client = OpenReward(base_url=ors.url)
    yield client.environments.get("CalculatorEnv")
    client.close()


def test_server_lists_splits_tasks_and_tools(sdk_env):
    assert sdk_env.list_splits() == ["train", "test"]
    assert sdk_env.num_tasks("train") == SPLIT_SIZES["train"]
    assert sdk_env.get_task("test", 3).task_spec == make_task("test", 3)
    assert sorted(t.name for t in sdk_env.list_tools()) == ["answer", "calculate"]


def test_episode_rewards_come_from_the_environment(sdk_env):
    task = make_task("test", 2)
    with sdk_env.session(split="test", index=2) as session:
        prompt = session.get_prompt()[0].text
        assert task["expression"] in prompt and str(true_answer(task)) not in prompt
        out = session.call_tool("calculate", {"expression": task["expression"]})
        assert out.blocks[0].text == str(true_answer(task)) and out.reward is None and not out.finished
        out = session.call_tool("calculate", {"expression": "import os"})
        assert out.blocks[0].text.startswith("Error:") and out.reward is None
        out = session.call_tool("answer", {"answer": f" {true_answer(task)}.0 "})
        assert (out.blocks[0].text, out.reward, out.finished) == ("Correct.", 1.0, True)
        with pytest.raises(Exception, match="episode_finished"):
            session.call_tool("answer", {"answer": "1"})
    with sdk_env.session(split="train", index=0) as session:
        out = session.call_tool("answer", {"answer": str(true_answer(make_task("train", 0)) + 1)})
        assert (out.blocks[0].text, out.reward, out.finished) == ("Incorrect.", 0.0, True)
    with sdk_env.session(split="train", index=1) as session:
        out = session.call_tool("answer", {"answer": "two hundred"})
        assert out.reward == 0.0 and "not an integer" in out.blocks[0].text


def test_calculator_is_capped_per_episode(sdk_env):
    with sdk_env.session(split="train", index=5) as session:
        texts = [session.call_tool("calculate", {"expression": "1 + 1"}).blocks[0].text for _ in range(6)]
    assert texts[:5] == ["2"] * 5 and texts[5].startswith("Error: at most 5")


def test_sdk_variables_are_set_inside_and_restored_after(monkeypatch):
    monkeypatch.setenv("OPENREWARD_SESSION_URL", "http://previous")
    monkeypatch.delenv("OPENREWARD_API_URL", raising=False)
    monkeypatch.delenv("OPENREWARD_API_KEY", raising=False)
    with sdk_pointed_at("http://127.0.0.1:9/"):
        assert os.environ["OPENREWARD_API_URL"] == os.environ["OPENREWARD_SESSION_URL"] == "http://127.0.0.1:9"
        assert os.environ["OPENREWARD_API_KEY"] and os.environ["OPENREWARD_DISABLE_UPDATE_CHECK"] == "1"
    assert os.environ["OPENREWARD_SESSION_URL"] == "http://previous"
    assert "OPENREWARD_API_URL" not in os.environ and "OPENREWARD_API_KEY" not in os.environ


def test_bad_targets_fail_early_with_clear_errors(monkeypatch):
    monkeypatch.delenv("OPENREWARD_API_KEY", raising=False)
    with pytest.raises(ValueError, match="OPENREWARD_API_KEY"):
        open_ors_target("Eigent/SETA")
    with pytest.raises(ValueError, match="neither a URL"):
        open_ors_target("not a target")
    with pytest.raises(ServerError, match="No server answers"):
        open_ors_target("http://127.0.0.1:9")
    monkeypatch.setenv("OPENREWARD_API_KEY", "k")
    assert open_ors_target("Eigent/SETA") == ("Eigent/SETA", None)
