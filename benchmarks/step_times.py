"""Where a finished GRPO run's steps went, step by step, read from trackio's local log (TRL's own timers).

    python -m benchmarks.step_times [--run 01_grpo_walkthrough-trainer-cpu] [--db PATH] [--runs-back 0]

TRL logs, for every optimizer step, `step_time` (the whole step) and its profiling timers: `_prepare_inputs`
(generating and scoring the step's rollouts) and `compute_loss` (one per loss pass: the forward pass only; the
backward pass and the optimizer are the rest). The notebooks log to trackio, whose local database keeps every
run's rows under its run name; a run starts where `global_step` goes back to 1. `--runs-back 1` reads the run
before the last one.

Each step prints its time, the generation and loss-pass parts, how many loss passes ran (a pass that
`helpers.compute.fast_trainers.FastGRPOTrainer` skipped logs no `compute_loss` timer) and
`frac_reward_zero_std`; the summary gives the mean step with and without its loss passes.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
from pathlib import Path

# TRL names each timer after the trainer's class: GRPOTrainer, or FastGRPOTrainer (helpers.compute.fast_trainers)
PREPARE = "._prepare_inputs"
LOSS = ".compute_loss"
TIMER = "profiling/Time taken: "


def _timer(logged: dict, suffix: str) -> float | None:
    """The value of the trainer's profiling timer ending in `suffix`, whatever the trainer class; None if absent."""
    return next((v for k, v in logged.items() if k.startswith(TIMER) and k.endswith(suffix)), None)


def default_db(project: str = "agent-rl-notebooks") -> Path:
    """trackio's local database of `project` (TRACKIO_DIR, else HF_HOME/trackio)."""
    from trackio.utils import _get_trackio_dir

    return _get_trackio_dir() / f"{project}.db"


def runs(db: Path, run_name: str) -> list[list[dict]]:
    """Every run logged under `run_name`, oldest first; each a list of steps: {"step", "seconds", "generation",
    "loss_forward", "passes", "frac_reward_zero_std", "reward"}."""
    if not Path(db).exists():
        raise FileNotFoundError(f"no trackio database at {db}: pass --db, or run a notebook with REPORT_TO='trackio'")
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT metrics FROM metrics WHERE run_name = ? ORDER BY id", (run_name,)).fetchall()
    found, steps, pending = [], [], {"generation": 0.0, "loss_forward": 0.0, "passes": 0}
    for (text,) in rows:
        logged = json.loads(text)
        pending["generation"] += _timer(logged, PREPARE) or 0.0
        loss = _timer(logged, LOSS)
        if loss is not None:
            pending["loss_forward"] += loss
            pending["passes"] += 1
        if "train/step_time" not in logged:
            continue
        step = int(logged.get("train/global_step", len(steps) + 1))
        if steps and step <= steps[-1]["step"]:   # global_step went back: a new run under the same name
            found.append(steps)
            steps = []
        steps.append({"step": step, "seconds": logged["train/step_time"], **pending,
                      "frac_reward_zero_std": logged.get("train/frac_reward_zero_std"),
                      "reward": logged.get("train/reward")})
        pending = {"generation": 0.0, "loss_forward": 0.0, "passes": 0}
    if steps:
        found.append(steps)
    if not found:
        raise ValueError(f"no GRPO steps logged under the run name {run_name!r} in {db}")
    return found


def summary(steps: list[dict]) -> dict:
    """Mean seconds of the steps that ran loss passes and of those that ran none (every pass skipped), and the
    share of the whole run each part took."""
    full = [s["seconds"] for s in steps if s["passes"]]
    empty = [s["seconds"] for s in steps if not s["passes"]]
    total = sum(s["seconds"] for s in steps)
    generation = sum(s["generation"] for s in steps)
    return {"steps": len(steps), "seconds": total, "steps_without_a_pass": len(empty),
            "mean_step_with_passes": statistics.mean(full) if full else None,
            "mean_step_without": statistics.mean(empty) if empty else None,
            "generation_share": generation / total if total else None,
            "loss_pass_share": 1 - generation / total if total else None}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default="01_grpo_walkthrough-trainer-cpu", help="trackio run name")
    parser.add_argument("--db", type=Path, default=None, help="trackio database (default: trackio's own)")
    parser.add_argument("--runs-back", type=int, default=0, help="0: the last run under that name, 1: the one before")
    args = parser.parse_args(argv)
    steps = runs(args.db or default_db(), args.run)[-1 - args.runs_back]
    print(f"{'step':>4} {'seconds':>8} {'generation':>10} {'loss fwd':>8} {'passes':>6} {'zero std':>8} {'reward':>6}")
    for s in steps:
        zero = "" if s["frac_reward_zero_std"] is None else f"{s['frac_reward_zero_std']:.2f}"
        reward = "" if s["reward"] is None else f"{s['reward']:.3f}"
        print(f"{s['step']:>4} {s['seconds']:>8.1f} {s['generation']:>10.1f} {s['loss_forward']:>8.1f} "
              f"{s['passes']:>6} {zero:>8} {reward:>6}")
    print(json.dumps(summary(steps), indent=1))


if __name__ == "__main__":
    main()
