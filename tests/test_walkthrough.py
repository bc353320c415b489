"""helpers.chain_sum.walkthrough: notebook 01's one-line steps fail early and clearly on bad input.

The steps that sample and train (one_group_by_hand, run_preflight, environment_server with a local server) run in
notebook 01's own tests (tests/test_nb01_grpo.py), on the real notebook.
"""

from __future__ import annotations

import pytest

from helpers.chain_sum.walkthrough import check_task, check_tool_schema, describe_start, environment_server
from helpers.servers import ServerError, free_port


def test_check_task_names_an_unknown_dataset_and_an_unreachable_server(capsys):
    check_task("chain_sum", {"min_terms": 2}, None)
    assert "dataset: chain_sum {'min_terms': 2}" in capsys.readouterr().out
    with pytest.raises(ValueError, match="Unknown DATASET_NAME 'chain_summ'.*Did you mean 'chain_sum'"):
        check_task("chain_summ", {}, None)
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerError, match=url.replace(".", r"\.")):
        check_task("chain_sum", {}, url)


def test_check_tool_schema_accepts_the_shared_tool_and_names_an_edited_one(capsys):
    from helpers.prompts import answer

    check_tool_schema(answer)
    assert '"name": "answer"' in capsys.readouterr().out

    def answer(answer: str, working: str) -> str:   # noqa: F811 - an edited tool: another argument
        """Submit the final answer for the current question.

        Args:
            answer: The agent's answer (will be parsed as a number server-side).
            working: The sums that led to it.
        """
        return answer

    with pytest.raises(ValueError, match="(?s)differs from helpers.prompts.answer.*working"):
        check_tool_schema(answer)


def test_describe_start_says_what_notebook_02_measured_and_where_this_run_differs(tmp_path, monkeypatch, capsys):
    from helpers.chain_sum import walkthrough

    record = {"dataset_config": {"min_terms": 2}, "accuracy_after": 0.56, "format_after": 0.99,
              "teacher_shows_work": True}
    monkeypatch.setattr(walkthrough, "warm_start_record", lambda notebook: record)
    assert describe_start("01_grpo_walkthrough", "notebook 02 (runs/02_sft_warmup/checkpoint)", "chain_sum",
                          {"min_terms": 3}, 96) == record
    out = capsys.readouterr().out
    assert "held-out accuracy 56%, format 99%" in out
    assert "not what the checkpoint saw" in out and "max_completion_length=96" in out
    assert describe_start("01_grpo_walkthrough", "smollm2-135m (base)", "chain_sum", {}, 96) == {}


def test_environment_server_refuses_a_given_url_that_does_not_hold_the_sessions(tmp_path):
    """A given URL (a Space) that answers but caps its sessions below the run's: an error naming the count now,
    not a refused session midway through training."""
    from helpers.servers import LocalServer

    server = LocalServer("reasoning_gym_env.server.app:app", env={"MAX_CONCURRENT_ENVS": "2"}, name="rg-capped",
                         log_dir=tmp_path).start()
    try:
        url, ours = environment_server(server.base_url, 2, log_dir=tmp_path)
        assert (url, ours) == (server.base_url, None)
        with pytest.raises(ServerError, match="3"):
            environment_server(server.base_url, 3, log_dir=tmp_path)
    finally:
        server.stop()
