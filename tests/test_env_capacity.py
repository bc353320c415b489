"""benchmarks/env_capacity.py at its tiny size (seconds): the server holds its MAX_CONCURRENT_ENVS sessions, the
next is refused with OpenEnv's CAPACITY_REACHED frame naming cap/cap, and helpers.servers.resilient turns that
frame into its wait-then-`EnvironmentFull` message."""

from __future__ import annotations

import pytest

from benchmarks import env_capacity
from helpers.servers import LocalServer
from helpers.servers.resilient import EnvironmentFull, resilient
from reasoning_gym_env import ReasoningGymEnv


def test_tiny_capacity_run_holds_its_cap_and_refuses_the_next(tmp_path):
    lines = []
    result = env_capacity.run("tiny", log_dir=tmp_path, out=lines.append)
    rg = result["servers"]["reasoning_gym"]
    assert rg["cap"] == 4 and rg["held"] == 4
    assert [lv["sessions"] for lv in rg["levels"]] == [1, 4]
    assert all(lv["step_p50_ms"] and lv["step_p99_ms"] >= lv["step_p50_ms"] for lv in rg["levels"])
    reply = rg["refusal"]["reply"]
    assert rg["refusal"]["refused_at"] == 5 and reply["type"] == "error"
    assert reply["data"]["code"] == "CAPACITY_REACHED"
    assert reply["data"]["message"].startswith("Server at capacity: 4/4 sessions active")
    assert any("session 5 of cap 4: CAPACITY_REACHED" in line for line in lines)


def test_the_wrapper_names_the_capacity_of_a_real_full_server(tmp_path):
    with LocalServer("reasoning_gym_env.server.app:app", env={"MAX_CONCURRENT_ENVS": "2"}, name="reasoning_gym",
                     log_dir=tmp_path) as server:
        holders = [resilient(ReasoningGymEnv, base_url=server.base_url) for _ in range(2)]
        for h in holders:
            h.reset(dataset_name="chain_sum", seed=0)
        client = resilient(ReasoningGymEnv, base_url=server.base_url, capacity_timeout_s=0.5, out=lambda _: None)
        with pytest.raises(EnvironmentFull, match=r"is full: 2/2 sessions in use \(CAPACITY_REACHED\)"):
            client.reset(dataset_name="chain_sum", seed=0)
        holders[0].close()
        assert client.reset(dataset_name="chain_sum", seed=0).observation.question
        for c in (client, holders[1]):
            c.close()
