"""Notebook 00 end to end with PROFILE=tiny: echo (async, sync, MCP), Wordle, the code feedback
environment under attack, and the environment_factory class driven by hand (no training: that starts in 01)."""

from __future__ import annotations

import pytest

from tools.notebooks import NOTEBOOKS_DIR, cell_outputs_text, load_cells

NOTEBOOK = "00_openenv_quickstart"


@pytest.mark.slow
def test_tiny_run_records_sane_metrics(notebook_runner):
    metrics, executed = notebook_runner(NOTEBOOK)
    assert metrics["profile"] == "tiny" and metrics["model"] is None   # no model: this notebook trains nothing
    # Part 1: echo over the typed client and over MCP
    assert metrics["echo_reward"] == pytest.approx(1.5) and metrics["echo_message_length"] == 15
    assert metrics["mcp_tools"] == ["echo_message", "echo_with_length"]
    assert metrics["mcp_echo"] == "Hello over MCP"
    assert metrics["mcp_echo_with_length"] == {"message": "Hello over MCP", "length": 14}
    # Part 2: Wordle turns were played and scored
    assert 1 <= metrics["wordle_turns"] <= 3
    assert all(r in (0.0, 1.0) for r in metrics["wordle_rewards"])
    # Part 3: the free-mode rewards, and a graded task
    assert metrics["code_valid_reward"] == 1.0 and metrics["code_broken_reward"] == -0.5
    assert metrics["code_partial_reward"] == 0.5
    # Part 4: every attack contained and reported, the server kept serving
    status = metrics["attack_status"]
    assert status["infinite loop"] == "timeout"
    assert status["memory bomb"] == "memory_limit"
    assert status["MBs of output"] == "output_limit"
    assert status["read server source"] == "error" and status["network socket"] == "error"
    assert 0 <= metrics["fork_loop_children"] < 64
    # every attack but the bounded fork loop ended as a failed run: reward -0.5, never "ok"
    for name, reward in metrics["attack_reward"].items():
        if name != "bounded fork loop":
            assert reward == -0.5 and status[name] != "ok", (name, status[name], reward)
    assert metrics["server_healthy_after_attacks"] and metrics["next_episode_reward"] == 1.0
    assert 0 < metrics["sandbox_overhead_ms_direct"] < 5000
    assert set(metrics["isolation"]) >= {"processes", "network", "files", "resources", "environment"}
    # Part 5: the environment_factory class, driven by hand: no submission -1, code that runs but fails the tests 0,
    # a right one 1 (the best submission counts)
    assert metrics["factory_rewards"] == {"before any submission": -1.0, "after a wrong one": 0.0,
                                          "after a right one": 1.0}
    text = cell_outputs_text(executed)
    assert "reward before any submission: -1.0" in text and "status: ok" in text
    assert "grpo_steps" not in metrics and not any(k.startswith("reward_curve") for k in metrics)
    assert executed.exists()


def test_the_notebooks_environment_factory_class_scores_as_the_trainer_will_see_it(tmp_path):
    """The `CodeTask` class a learner edits (the cell tagged "env-factory"), driven as GRPOTrainer drives it:
    no submission -1, code that runs but fails the tests 0, the right function 1, the best submission counting."""
    from helpers.servers import LocalServer

    with LocalServer("code_feedback_env.server.app:app", env={"CODE_ENV_WALL_TIMEOUT_S": "5"},
                     name="code_feedback", log_dir=tmp_path) as server:
        cell = load_cells(NOTEBOOKS_DIR / f"{NOTEBOOK}.ipynb", "env-factory", namespace={"code_url": server.base_url})
        task = cell["CodeTask"]()
        try:
            assert task.reset(task="add", prompt="...") == ""   # the task is already in the prompt
            assert task.get_reward() == cell["NO_SUBMISSION_REWARD"] == -1.0
            report = task.run_code("def add(a, b):\n    return a - b")
            assert report.startswith("status: ok") and "0/3 tests passed" in report
            assert task.get_reward() == 0.0
            assert "3/3 tests passed" in task.run_code("def add(a, b):\n    return a + b")
            assert task.get_reward() == 1.0
            task.run_code("def add(a, b):\n    return a - b")
            assert task.get_reward() == 1.0                      # a later, worse submission does not lower it
            task.reset(task="add")
            assert task.get_reward() == -1.0                     # a new episode starts unscored
            assert "status: error" in task.run_code("def add(")  # a syntax error is reported, not raised
            assert task.get_reward() == -0.5
        finally:
            for session in cell["open_sessions"]:
                session.client.close()
