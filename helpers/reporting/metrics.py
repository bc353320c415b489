"""The metrics a notebook run records in its run folder's metrics.json (helpers.runs), for the tests.

The test harness runs a notebook with papermill and then asserts on that JSON, so "it ran" is never the whole test.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from helpers.compute.processes import (ONCE, from_every_process, is_main_process, process_count, process_index,
                                       trainer_record)
from helpers.reporting.intervals import paired_change
from helpers.runs import run_dir


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
    if not is_main_process():
        return path
    current = json.loads(path.read_text()) if path.exists() else {}
    current.update(_jsonable(metrics))
    path.write_text(json.dumps(current, indent=2, sort_keys=True))
    return path


def evaluation_metrics(before, after) -> dict:
    """The metrics of a before/after evaluation, named as the tests read them.

    `helpers.chain_sum.evaluation.EvalResult` (notebooks 01, 02): format/accuracy/exact with their intervals, the
    paired change, eval_n; `after=None` (no evaluation after training ran) records the "after" and change keys as
    None. `helpers.openreward.evaluation.SplitEvalResult` (notebook 04): test_* keys."""
    if hasattr(before, "format_compliance"):
        measured = before if after is None else after
        change, exact = paired_change(before, measured), paired_change(before, measured, exact=True)
        out = {"eval_n": measured.n, "accuracy_change": change.change, "accuracy_change_ci": change.ci,
               "questions_gained": change.gained, "questions_lost": change.lost,
               "exact_change": exact.change, "exact_change_ci": exact.ci}
        for when, result in (("before", before), ("after", measured)):
            out.update({f"format_{when}": result.format_compliance, f"format_ci_{when}": result.format_ci,
                        f"accuracy_{when}": result.accuracy, f"accuracy_ci_{when}": result.accuracy_ci,
                        f"exact_{when}": result.exact, f"exact_ci_{when}": result.exact_ci,
                        f"eval_seconds_{when}": result.seconds})
        if after is None:   # None, not a copy of "before"; it also replaces what an earlier run merged into metrics.json
            out.update({key: None for key in out if key.endswith("_after") or "change" in key or "questions_" in key})
        return out
    change = paired_change(before, after)   # the same tasks in the same order, before and after
    out = {"eval_split": after.split, "eval_tasks": after.n, "accuracy_change": change.change,
           "accuracy_change_ci": change.ci, "questions_gained": change.gained, "questions_lost": change.lost}
    for when, result in (("before", before), ("after", after)):
        out.update({f"test_accuracy_{when}": result.accuracy, f"test_accuracy_ci_{when}": result.accuracy_ci,
                    f"test_answered_{when}": result.answered, f"test_tool_use_{when}": result.tool_use,
                    f"test_by_difficulty_{when}": result.by_difficulty,
                    f"test_tool_use_by_difficulty_{when}": result.tool_use_by_difficulty})
    return out


# What a run's curves are compared on (helpers.reporting.reference): the training reward and each reward stream, the reply
# length, tool use and the share of groups without a gradient, per logged step.
CURVE_KEYS = ("reward", "reward_std", "frac_reward_zero_std", "completions/mean_length", "completions/clipped_ratio",
              "tools/call_frequency", "tools/failure_frequency", "entropy")


def curves(log_history: list[dict]) -> dict[str, list]:
    """{"step": [...], key: [...]} for every logged training step: the CURVE_KEYS and each `rewards/<name>/mean`
    present, None where a step did not log a key (so every list lines up with "step")."""
    rows = [h for h in log_history if "step" in h and any(k in h for k in ("reward", "loss"))]
    keys = [k for k in CURVE_KEYS if any(k in h for h in rows)]
    keys += sorted({k for h in rows for k in h if k.startswith("rewards/") and k.endswith("/mean")})
    out = {"step": [h["step"] for h in rows]}
    for key in keys:
        out[key] = [float(h[key]) if isinstance(h.get(key), (int, float)) else None for h in rows]
    return out


def trainer_metrics(trainer) -> dict:
    """What a finished TRL trainer ran with and logged: steps, the config's knobs, the reward curve."""
    args = trainer.args
    out = {"steps": trainer.state.global_step, "max_steps": args.max_steps, "learning_rate": args.learning_rate,
           "activation_checkpointing": getattr(args, "activation_checkpointing", None)}
    for knob in ("num_generations", "temperature", "top_entropy_quantile", "generation_batch_size",
                 "max_completion_length"):
        if hasattr(args, knob):
            out[knob] = getattr(args, knob)
    out["curves"] = curves(trainer.state.log_history)
    rewards = [r for r in out["curves"].get("reward", []) if r is not None]
    if rewards:
        out["reward_curve"] = rewards
    # GRPO's share of groups whose rollouts all scored the same (no gradient); compare with a preflight's mixed share
    zero_std = [z for z in out["curves"].get("frac_reward_zero_std", []) if z is not None]
    if zero_std:
        out["frac_reward_zero_std_curve"] = zero_std
        out["frac_reward_zero_std"] = sum(zero_std) / len(zero_std)
    return out


def record_run(notebook: str, settings, *, precision=None, before=None, after=None, budget=None, trainer=None,
               per_process: dict | None = None, **extra) -> Path:
    """Record a notebook run from its objects: the profile and model from `settings`, the precision
    `choose_precision` picked, whether LoRA trained, the before/after evaluation (`evaluation_metrics`), the time budget's
    summary, the trainer's steps, knobs, reward curve and zero-std share (`trainer_metrics`), and whatever else the notebook
    measured (`extra`, which wins). Returns the metrics.json path.
    Several processes (`accelerate launch`, every one calls this): `processes` holds one record per process, its
    optimizer steps, a hash of its weights, its environment episodes and its `per_process` values (what it served,
    for instance), so a run shows they trained alike; the main process writes the file."""
    metrics = {"profile": settings.profile, "model": getattr(settings, "model", None)}   # None: no model (00)
    if getattr(settings, "seed", None) is not None:
        metrics["seed"] = settings.seed
    if getattr(settings, "lora", None) is not None:
        metrics["lora"] = settings.lora
    if precision is not None:
        metrics.update(precision.as_metrics())
    if budget is not None and getattr(budget, "too_few_steps", None):
        after = None   # stopped before it trained: no evaluation after training ran (its keys are recorded as None)
    if before is not None:
        metrics.update(evaluation_metrics(before, after))
    if trainer is not None:
        metrics.update(trainer_metrics(trainer))
    if budget is not None:
        metrics.update(budget.summary())
    resilient = sys.modules.get("helpers.servers.resilient")
    if resilient is not None:   # episodes through resilient clients: scored by the environment, retried, or failed
        metrics["env_episodes"] = resilient.TOTALS.as_dict()
    metrics["processes"] = process_count()
    if process_count() > 1:
        mine = {"rank": process_index(), "once": ONCE}
        if trainer is not None:
            mine.update(trainer_record(trainer))
        if resilient is not None:
            mine["env_episodes"] = metrics["env_episodes"]
        mine.update(per_process or {})
        metrics["per_process"] = from_every_process(mine)
    metrics.update(extra)
    return record_metrics(notebook, **metrics)
