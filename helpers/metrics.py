"""Where a notebook run leaves its outputs, and the metrics it records for the tests.

Each notebook writes into `run_dir(notebook)` = $AGENT_RL_RUNS/<notebook> (default ./runs/<notebook>):
checkpoints, collected rollouts, plots and `metrics.json`. The test harness runs a notebook with
papermill and then asserts on that JSON, so "it ran" is never the whole test.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path


def runs_dir() -> Path:
    return Path(os.environ.get("AGENT_RL_RUNS", "runs")).resolve()


def run_dir(notebook: str) -> Path:
    path = runs_dir() / notebook
    path.mkdir(parents=True, exist_ok=True)
    return path


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return _jsonable(value.item())
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def record_metrics(notebook: str, **metrics) -> Path:
    """Merge `metrics` into run_dir(notebook)/metrics.json and return its path.

    Under `accelerate launch` only rank 0 writes (the others would race on the same file).
    """
    path = run_dir(notebook) / "metrics.json"
    if int(os.environ.get("RANK", "0")) != 0:
        return path
    current = json.loads(path.read_text()) if path.exists() else {}
    current.update(_jsonable(metrics))
    path.write_text(json.dumps(current, indent=2, sort_keys=True))
    return path


def load_metrics(notebook: str) -> dict:
    path = runs_dir() / notebook / "metrics.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: run the notebook {notebook} first.")
    return json.loads(path.read_text())
