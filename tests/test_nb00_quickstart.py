"""Notebook 00 end to end with PROFILE=tiny: echo (async, sync, MCP), Wordle, the code feedback
environment under attack, and a couple of GRPO steps through environment_factory."""

from __future__ import annotations

import pytest

from helpers.notebooks import cell_outputs_text

from eval_checks import assert_precision_recorded

NOTEBOOK = "00_openenv_quickstart"


@pytest.mark.slow
def test_tiny_run_records_sane_metrics(notebook_runner):
    metrics, executed = notebook_runner(NOTEBOOK)
    assert metrics["profile"] == "tiny"
    assert_precision_recorded(metrics, cell_outputs_text(executed))
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
    # Part 5: GRPO ran through environment_factory
    assert metrics["grpo_steps"] == 2
    assert metrics["activation_checkpointing"] is False  # CPU: TRL's default would only cost time
    assert -1.0 <= metrics["grpo_reward_mean"] <= 1.0
    assert all(-1.0 <= r <= 1.0 for r in metrics["reward_curve"]) and len(metrics["reward_curve"]) == 2
    if metrics["grpo_tool_call_frequency"] == 0:   # no rollout submitted code: each got the no-submission reward
        assert metrics["grpo_reward_mean"] == -1.0
    # one of the model's own rollouts of the last step, shown whole (helpers.show); the reward is get_reward()'s
    text = cell_outputs_text(executed)
    assert "prompt    │ Write a Python function" in text and "reward    │ CodeTask " in text
    if metrics["grpo_tool_call_frequency"] > 0:
        assert "tool call │ run_code(code=" in text and "env reply │ status: " in text
    else:   # the tiny model learned the tool-call shape for another tool: it writes text, calls nothing
        assert "tool call │ (none: the model did not call a tool)" in text and "reward    │ CodeTask -1.00" in text
    assert "write_token" not in text and 'trackio show --project "agent-rl-notebooks"' in text  # no dashboard frame
    assert executed.exists()
