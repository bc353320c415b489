"""The benchmarks still run: a smoke test, not a measurement (`make bench` measures).

One cheap benchmark runs end to end through `benchmarks.run_all` (the environment servers at
--size tiny, a few seconds); every other benchmark module is imported and its table rendered from a
result of the right shape, so a broken import or table fails here without the minutes of training
and notebook runs the full set costs. Numbers from a tiny run mean nothing, so nothing is compared
with a threshold beyond "it measured something".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_env_server_benchmark_runs_end_to_end(tmp_path):
    env = {**os.environ, "AGENT_RL_RUNS": str(tmp_path / "runs")}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.run_all", "--size", "tiny", "--only", "env_servers",
                           "--out", str(tmp_path)], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["size"] == "tiny" and data["machine"]["cpus"] >= 1 and data["machine"]["versions"]["trl"]
    servers = data["env_servers"]["servers"]
    assert {"reasoning_gym", "reasoning_gym_baseline"} <= set(servers)
    for name, server in servers.items():
        for level in server["levels"]:
            assert level["episodes_per_s"] > 0 and not level["errors"], (name, level)
        if name.endswith("baseline"):   # OpenEnv's default cap of 1: seven of eight sessions refused
            assert server["levels"][-1]["refused_sessions"] == server["levels"][-1]["sessions"] - 1
        else:
            assert all(level["refused_sessions"] == 0 for level in server["levels"]), name
    assert (tmp_path / "env_servers.png").stat().st_size > 10_000
    assert "| reasoning_gym | websocket |" in (tmp_path / "results.md").read_text()


def test_every_benchmark_imports_and_its_table_renders():
    from benchmarks import run_all

    for name, module in run_all.BENCHMARKS.items():
        assert callable(module.run) and callable(module.plot), name
    table = run_all.markdown({
        "size": "tiny", "load_average_before": [0, 0, 0], "load_average_after": [0, 0, 0],
        "machine": {"cpus": 2, "memory_gib": 1.0, "gpu": None},
        "training": {"profiles": {"tiny": {"profile": "tiny", "model": "tiny-toolcall", "rollouts_per_step": 8,
                                           "s_per_step": 0.2, "env_s_per_step": 0.01, "env_share_pct": 5.0}}},
        "precision": {"model": "tiny", "cpu": {"model_name": "x", "flags": []},
                      "rows": [{"precision": "bf16", "train_step_s": 1, "probe_pass_s": 1, "generate_s": 1,
                                "generate_tokens_per_s": 1}]},
        "rollouts": {"rollouts": 4, "prompt_tokens": 265, "max_new_tokens": 8, "temperature": 1.2, "model": "tiny",
                     "transformers": "5", "rows": [{"path": "floor", "seconds": 1, "rollout_tokens": 32,
                                                    "tokens_per_s": 32}, {"path": "continuous", "error": "E: x"}]},
        "notebooks": {"notebooks": [{"notebook": "harness_smoke", "wall_s": 1.0, "ok": True}]},
    })
    assert "| tiny | tiny-toolcall |" in table and "| bf16 |" in table and "| harness_smoke |" in table
    assert "| floor | 1 | 32 | 32 |" in table and "| continuous | failed: E: x |" in table


def test_rollouts_benchmark_times_every_path_with_the_tiny_model(tmp_path):
    """Each way of generating one GRPO group runs on the tiny model and produces the group's rollout tokens; the
    continuous-batching path reuses the shared prompt's full pages from its prefix cache."""
    env = {**os.environ, "AGENT_RL_RUNS": str(tmp_path / "runs")}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.run_all", "--size", "tiny", "--only", "rollouts",
                           "--out", str(tmp_path)], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "results.json").read_text())["rollouts"]
    from benchmarks.rollouts import PATHS

    rows = {r["path"]: r for r in data["rows"]}
    assert list(rows) == list(PATHS) and data["prompt_tokens"] > 200
    for name, row in rows.items():
        assert "error" not in row, (name, row.get("traceback"))
        # every rollout produced at least one token and at most max_new_tokens
        assert data["rollouts"] <= row["rollout_tokens"] <= data["rollouts"] * data["max_new_tokens"], name
        assert row["tokens_per_s"] == pytest.approx(row["rollout_tokens"] / row["seconds"], rel=0.01)
    # TRL's repeated prompts: the prompts after the first batch find its full pages in the cache
    page = rows["continuous"]["config"]["page_size"]
    assert rows["continuous"]["prefix_tokens_reused"] > 0 and rows["continuous"]["prefix_tokens_reused"] % page == 0
    assert (tmp_path / "rollouts.png").stat().st_size > 5_000
    assert "| repeated |" in (tmp_path / "results.md").read_text()
