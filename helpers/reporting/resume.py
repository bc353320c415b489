"""Runs that survive a disconnect: a checkpoint every N steps, and RESUME=True goes on from the last one.

A Colab runtime disconnects (idle, the 12-hour cap, preemption) and takes the kernel's memory with it.
What a notebook needs to go on is on disk, in its run folder (`RUNS_DIR`: a Google Drive folder on Colab):

    args = checkpoint_args(settings.checkpoint_steps)             # into GRPOConfig / SFTConfig
    before = kept(NB, "before_eval", evaluate, resume=RESUME, load=EvalResult.from_dict)
    trainer.train(resume_from_checkpoint=resume_point(args_output_dir, RESUME))

- `checkpoint_args`: the trainer saves model, optimizer, scheduler, RNG and step every N steps (the
  last one only, to spare the disk); 0 or None: no checkpoints (a run then cannot resume).
- `kept`: what was measured before training (the held-out "before", the preflight that chose the
  training questions) is written next to the checkpoints, and a resumed run reads it back, so the
  paired change compares the same questions and training goes on over the same rows.
- `resume_point`: the last checkpoint (TRL's `resume_from_checkpoint` restores all of it), or None
  with a line saying why the run starts from step 0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from helpers.compute.processes import on_main
from helpers.reporting.metrics import _jsonable
from helpers.runs import run_dir


class ResumeError(ValueError):
    """RESUME=True cannot go on from what is on disk; the message says what to set."""


def checkpoint_args(every: int | None) -> dict:
    """TrainingArguments fields for a checkpoint every `every` steps (None or 0: none)."""
    if not every:
        return {"save_strategy": "no"}
    return {"save_strategy": "steps", "save_steps": int(every), "save_total_limit": 1}


def last_checkpoint(folder: str | Path) -> str | None:
    """The newest `checkpoint-<step>` folder the trainer wrote in `folder`, or None."""
    from transformers.trainer_utils import get_last_checkpoint

    folder = Path(folder)
    return get_last_checkpoint(str(folder)) if folder.is_dir() else None


def resume_point(folder: str | Path, resume: bool, out=print) -> str | None:
    """What `trainer.train(resume_from_checkpoint=...)` gets: the last checkpoint when `resume`, else None."""
    if not resume:
        return None
    checkpoint = last_checkpoint(folder)
    if checkpoint is None:
        out(f"RESUME=True but there is no checkpoint in {folder}: training starts at step 0 "
            "(checkpoints are written every CHECKPOINT_STEPS steps; 0 or None writes none).")
        return None
    step = json.loads((Path(checkpoint) / "trainer_state.json").read_text()).get("global_step")
    out(f"resuming from {checkpoint} (step {step})")
    return checkpoint


def _state_path(notebook: str, name: str) -> Path:
    folder = run_dir(notebook) / "state"
    folder.mkdir(exist_ok=True)
    return folder / f"{name}.json"


def kept(notebook: str, name: str, compute: Callable[[], Any], *, resume: bool, load: Callable[[dict], Any],
         same: dict | None = None, out=print) -> Any:
    """`compute()` once per run: saved in run_dir(notebook)/state/<name>.json; a resumed run loads it back.

    `same`: settings the saved value depends on (e.g. {"eval_n": 450}); a resumed run whose values differ
    stops with a ResumeError naming them, instead of pairing different questions. Several processes (`accelerate
    launch`): the main one computes and saves it, every process gets the value."""
    return on_main(_kept, notebook, name, compute, resume=resume, load=load, same=same, out=out)


def _kept(notebook: str, name: str, compute: Callable[[], Any], *, resume: bool, load: Callable[[dict], Any],
          same: dict | None, out) -> Any:
    path = _state_path(notebook, name)
    same = _jsonable(same or {})
    if resume and path.exists():
        saved = json.loads(path.read_text())
        changed = {k: (saved["same"].get(k), v) for k, v in same.items() if saved["same"].get(k) != v}
        if changed:
            detail = ", ".join(f"{k}: {a!r} then, {b!r} now" for k, (a, b) in changed.items())
            raise ResumeError(f"RESUME=True, but {name} was measured with other settings ({detail}). Set them "
                              "back to go on, or RESUME=False to start a new run.")
        out(f"{name}: kept from the interrupted run ({path})")
        return load(saved["value"])
    value = compute()
    record = value.to_dict() if hasattr(value, "to_dict") else value
    path.write_text(json.dumps({"same": same, "value": _jsonable(record)}))
    return value
