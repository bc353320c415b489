"""Where a notebook run leaves its outputs: its run folder, and the metrics.json the tests read.

Each notebook writes into `run_dir(notebook)` = $AGENT_RL_RUNS/<notebook> (default: runs/<notebook> at the top of
this checkout, whatever the working directory, so `make demo` at the top and `jupyter lab notebooks/` share one
runs/ folder; ./runs when helpers is installed from a package, as on Colab): checkpoints, collected rollouts, plots
and `metrics.json` (written by helpers.reporting.metrics).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]


def runs_dir() -> Path:
    """$AGENT_RL_RUNS, else runs/ at the top of this checkout (./runs when helpers is not in a checkout)."""
    if os.environ.get("AGENT_RL_RUNS"):
        return Path(os.environ["AGENT_RL_RUNS"]).resolve()
    in_checkout = (CHECKOUT / "notebooks").is_dir() and (CHECKOUT / "helpers").is_dir()
    return (CHECKOUT / "runs") if in_checkout else Path("runs").resolve()


def use_runs_dir(path: str | os.PathLike | None) -> Path:
    """Make `path` the runs folder of this process (the notebooks' RUNS_DIR; None keeps the current one).

    On Colab a folder under /content/drive (Google Drive) is mounted first, so checkpoints and the
    notebook 02 -> 01 hand-off survive the runtime."""
    if path is not None:
        path = str(path)
        if path.startswith("/content/drive") and not Path("/content/drive/MyDrive").exists():
            try:
                from google.colab import drive  # only on Colab
            except ImportError:
                raise ValueError(f"RUNS_DIR={path!r} is a Google Drive folder, which only Colab can mount; "
                                 "set a local folder instead.") from None
            drive.mount("/content/drive")
        os.environ["AGENT_RL_RUNS"] = path
    folder = runs_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def run_dir(notebook: str) -> Path:
    path = runs_dir() / notebook
    path.mkdir(parents=True, exist_ok=True)
    return path


def load_metrics(notebook: str) -> dict:
    path = runs_dir() / notebook / "metrics.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: run the notebook {notebook} first.")
    return json.loads(path.read_text())
