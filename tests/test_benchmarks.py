"""The benchmarks still run: `python -m benchmarks.run_all --size tiny` end to end.

Not a timed test: the numbers of a tiny run mean nothing (and a shared CI machine is noisy). It
checks that every benchmark ran, measured something positive, and wrote its JSON, plot and table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    env = {**os.environ, "AGENT_RL_RUNS": str(out / "runs")}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.run_all", "--size", "tiny", "--out", str(out)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "results.json").read_text()), out, proc.stdout


def test_machine_and_load_are_recorded(results):
    data, _, _ = results
    assert data["size"] == "tiny"
    assert data["machine"]["cpus"] >= 1 and data["machine"]["versions"]["trl"]
    assert len(data["load_average_before"]) == 3 and len(data["load_average_after"]) == 3


def test_env_server_benchmark(results):
    data, out, stdout = results
    servers = data["env_servers"]["servers"]
    assert {"reasoning_gym", "reasoning_gym_baseline"} <= set(servers)
    for name, server in servers.items():
        levels = server["levels"]
        assert [lv["sessions"] for lv in levels] == [1, 8], name
        for lv in levels:
            assert lv["episodes_per_s"] > 0 and lv["calls_per_s"] > 0, (name, lv)
            assert 0 < lv["step_p50_ms"] <= lv["step_p99_ms"], (name, lv)
            assert 0 < lv["reset_p50_ms"] <= lv["reset_p99_ms"], (name, lv)
            assert not lv["errors"], (name, lv)
        if name.endswith("baseline"):
            # OpenEnv's default cap of 1: seven of eight sessions refused
            assert levels[1]["refused_sessions"] == 7
        else:
            assert all(lv["refused_sessions"] == 0 for lv in levels), name
    assert (out / "env_servers.png").stat().st_size > 10_000
    assert "episodes/s" in stdout


def test_training_benchmark(results):
    data, out, _ = results
    tiny = data["training"]["profiles"]["tiny"]
    assert tiny["model"] == "tiny-toolcall" and tiny["steps"] == 2
    assert tiny["s_per_step"] > 0 and tiny["env_s_per_step"] > 0
    assert 0 < tiny["env_share_pct"] < 100
    assert tiny["resets"] >= 2 * tiny["rollouts_per_step"]  # the environment really was called
    assert (out / "training.png").stat().st_size > 10_000


def test_precision_benchmark(results):
    data, out, _ = results
    prec = data["precision"]
    assert [r["precision"] for r in prec["rows"]] == ["fp32", "bf16"] and prec["model"] == "tiny"
    assert all(r["train_step_s"] > 0 and r["probe_pass_s"] > 0 and r["generate_s"] > 0 for r in prec["rows"])
    assert prec["cpu"]["model_name"] and isinstance(prec["cpu"]["flags"], list)
    assert (out / "precision.png").stat().st_size > 5_000


def test_notebook_benchmark(results):
    data, out, _ = results
    rows = data["notebooks"]["notebooks"]
    assert [r["notebook"] for r in rows] == ["harness_smoke"]
    assert rows[0]["ok"], rows[0]["error"]
    assert rows[0]["wall_s"] > 0
    assert (out / "notebooks.png").stat().st_size > 5_000


def test_markdown_table_for_the_readme(results):
    _, out, _ = results
    table = (out / "results.md").read_text()
    assert "| reasoning_gym | websocket | 8 |" in table
    assert "| tiny | tiny-toolcall |" in table
    assert "| harness_smoke |" in table
    assert "| bf16 |" in table and "Precision on" in table
