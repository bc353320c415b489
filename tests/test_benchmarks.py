"""The benchmarks still run: a smoke test, not a measurement (`make bench` measures).

The cheap benchmarks run end to end through one `benchmarks.run_all --size tiny` (the environment
servers, the rollouts and the loss pass; each test reads its part of the results); every other benchmark
module is imported and its table rendered from a result of the right shape, so a broken import or table
fails here without the minutes of training and notebook runs the full set costs. Numbers from a tiny run
mean nothing, so nothing is compared with a threshold beyond "it measured something".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


TINY = ("env_servers", "rollouts", "loss_pass")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """`benchmarks.run_all --size tiny --only env_servers,rollouts,loss_pass` once, in a subprocess; the folder of
    the results, plots and table it wrote (one process: the three tests pay for its imports once)."""
    out = tmp_path_factory.mktemp("bench")
    env = {**os.environ, "AGENT_RL_RUNS": str(out / "runs")}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.run_all", "--size", "tiny", "--only", ",".join(TINY),
                           "--out", str(out)], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def _results(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


def test_env_server_benchmark_runs_end_to_end(tiny_run):
    data = _results(tiny_run)
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
    assert (tiny_run / "env_servers.png").stat().st_size > 10_000
    assert "| reasoning_gym | websocket |" in (tiny_run / "results.md").read_text()


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
        "rollouts": {"temperature": 0.9, "transformers": "5", "torch_threads": 2,
                     "limits": {"fp32_large_gflops": 100, "fp32_decode_gflops": 60, "bf16_large_gflops": 200,
                                "bf16_decode_gflops": 90, "copy_gb_per_s": 30},
                     "group": {"model": "tiny", "rollouts": 4, "prompt_tokens": 265, "max_new_tokens": 8},
                     "rows": [{"shape": "group", "path": "shared", "seconds": 1, "tokens": 32, "tokens_per_s": 32,
                               "speedup": 2.0, "of_floor": 0.25},
                              {"shape": "group", "path": "continuous_fork", "error": "E: x"}]},
        "notebooks": {"notebooks": [{"notebook": "harness_smoke", "wall_s": 1.0, "ok": True}]},
    })
    assert "| tiny | tiny-toolcall |" in table and "| bf16 |" in table and "| harness_smoke |" in table
    assert "| shared | 1 | 32 | 32 |  | 2.0x | 25% |  |" in table and "| continuous_fork | failed: E: x |" in table
    assert "fp32 100 GFLOP/s" in table


def test_rollouts_benchmark_times_every_path_against_the_machine_floor(tiny_run):
    """Both shapes (a GRPO group, an evaluation) run every path on the tiny model: each produces its tokens, is
    reported against the floor computed from the measured GEMM rate, the evaluation paths give the same
    greedy replies as the first batches of 8 (fp32) or as rows kept to the end (bf16), and the trainer's rollouts the
    same tokens with casts reused."""
    data = _results(tiny_run)["rollouts"]
    from benchmarks.rollouts import EVAL_PATHS, GROUP_PATHS

    assert data["limits"]["fp32_large_gflops"] > 0 and data["limits"]["copy_gb_per_s"] > 0
    rows = {(r["shape"], r["path"]): r for r in data["rows"]}
    assert list(rows) == [("group", p) for p in GROUP_PATHS] + [("evaluation", p) for p in EVAL_PATHS]
    group, evaluation = data["group"], data["evaluation"]
    assert group["prompt_tokens"] > 200
    for (shape, name), row in rows.items():
        assert "error" not in row, (name, row.get("traceback"))
        assert row["tokens_per_s"] == pytest.approx(row["tokens"] / row["seconds"], rel=0.02)
        assert 0 < row["floor_s"] and row["of_floor"] == pytest.approx(row["floor_s"] / row["seconds"], rel=0.05)
        if shape == "group":   # every rollout produced at least one token and at most max_new_tokens
            assert group["rollouts"] <= row["tokens"] <= group["rollouts"] * group["max_new_tokens"], name
            assert row["shared_prefix_tokens"] == group["prompt_tokens"] - 1
            if name == "trainer_bf16_reused":
                assert row["same_tokens_as_trainer_bf16"] is True
        else:
            assert row["same_replies"] == evaluation["questions"], name   # the tiny model is near-certain: all
            assert row["same_as"] == ("shared_b64_bf16" if name.endswith("_bf16") else "batch8")
            assert row["replies_per_s"] == pytest.approx(evaluation["questions"] / row["seconds"], rel=0.02)
            assert row["shared_prefix_tokens"] > 200          # the system prompt + tool schema
    assert (tiny_run / "rollouts.png").stat().st_size > 5_000
    assert "| dropping_b256_bf16 |" in (tiny_run / "results.md").read_text()


def test_rollouts_benchmark_times_chosen_paths_and_writes_their_replies(tmp_path):
    """`--paths` times only the paths named (what pairing two environments path by path needs), and `--replies`
    writes each evaluation path's greedy token ids, to compare stacks reply by reply."""
    from benchmarks.rollouts import run

    data = run("tiny", out=lambda *_: None, shapes=("evaluation",), paths=("batch8", "shared_b64"),
               replies_to=str(tmp_path / "rep"))
    assert [(r["shape"], r["path"]) for r in data["rows"]] == [("evaluation", "batch8"), ("evaluation", "shared_b64")]
    first, second = (json.loads((tmp_path / f"rep.{p}.json").read_text()) for p in ("batch8", "shared_b64"))
    assert len(first) == data["evaluation"]["questions"] and first == second


def test_loss_pass_benchmark_times_every_path_against_the_machine_floor(tiny_run):
    """The GRPO loss pass (tiny model): each path forward + backward, timed, reported against its floor and
    against the plain pass; the prompt the rows share is the real system prompt and tool schema."""
    data = _results(tiny_run)["loss_pass"]
    from benchmarks.loss_pass import PATHS

    assert [r["path"] for r in data["results"]] == list(PATHS) and data["tokens_per_row"] > 300
    for row in data["results"]:
        # both rounded as printed (3 and 2 decimals): on a loaded machine of_floor is ~0.008, below 5 % of rounding
        assert row["seconds"] > 0 and row["of_floor"] == pytest.approx(row["floor_s"] / row["seconds"], rel=0.05,
                                                                        abs=5e-4)
        assert row["speedup"] == pytest.approx(data["results"][0]["seconds"] / row["seconds"], rel=0.05, abs=5e-3)
    assert (tiny_run / "loss_pass.png").stat().st_size > 5_000
    assert "| fp32 | shared |" in (tiny_run / "results.md").read_text()
