"""Maintain the reference band (helpers/reporting/reference_runs.json): store measured runs, tabulate their spread.

    python -m tools.reference_band add NOTEBOOK runs/.../metrics.json ... --machine "..." [--meaning '{"behind": "..."}']
    python -m tools.reference_band spread NOTEBOOK metrics.json ...   # held-out change across seeds, as a table

What the notebooks read from the band (reference_band, where_run_sits) stays in helpers.reporting.reference.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from helpers.reporting.reference import REFERENCE_FILE, load_references


def add_runs(notebook: str, metrics_paths: list[str], *, machine: str, meaning: dict | None = None,
             path: Path = REFERENCE_FILE) -> dict:
    """Store the curves of recorded runs (their metrics.json) as `notebook`'s reference for their profile."""
    references = load_references(path)
    for metrics_path in metrics_paths:
        metrics = json.loads(Path(metrics_path).read_text())
        if not metrics.get("curves"):
            raise ValueError(f"{metrics_path} holds no curves: re-run the notebook with this version of helpers.")
        entry = references.setdefault(notebook, {}).setdefault(metrics["profile"], {"runs": []})
        entry["machine"] = machine
        if meaning:
            entry["meaning"] = meaning
        entry["runs"].append({"seed": metrics.get("seed"), "machine": machine, "curves": metrics["curves"]})
    path.write_text(json.dumps(references, indent=1) + "\n")
    return references


def spread(metrics_paths: list[str], key: str = "accuracy_change") -> dict:
    """The held-out change of several runs of one recipe (one per training seed): each run's paired change and its
    95 % interval, then the mean, the range and how many intervals exclude 0: what "what to expect" quotes."""
    runs = []
    for metrics_path in metrics_paths:
        m = json.loads(Path(metrics_path).read_text())
        if m.get(key) is None:
            raise ValueError(f"{metrics_path} records no {key}: "
                             + (f"its training stopped early ({m['stopped_too_few_steps']})"
                                if m.get("stopped_too_few_steps") else "the run has no evaluation after training")
                             + ". Leave it out of the spread.")
        low, high = m[f"{key}_ci"]
        runs.append({"seed": m.get("seed"), "change": m[key], "ci": [low, high], "resolved": low > 0 or high < 0,
                     "steps": m.get("steps_run", m.get("steps")), "seconds_per_step": m.get("seconds_per_step"),
                     "before": m.get("accuracy_before", m.get("test_accuracy_before")),
                     "after": m.get("accuracy_after", m.get("test_accuracy_after")),
                     "gained": m.get("questions_gained"), "lost": m.get("questions_lost"),
                     "wall_seconds": m.get("wall_seconds")})
    changes = [r["change"] for r in runs]
    return {"runs": runs, "mean": sum(changes) / len(changes), "lowest": min(changes), "highest": max(changes),
            "resolved": sum(r["resolved"] for r in runs)}


def describe_spread(result: dict) -> str:
    lines = ["| seed | steps | s/step | before | after | paired change [95 %] | gained / lost | wall (s) |",
             "|---:|---:|---:|---:|---:|---|---|---:|"]
    def show(value, form):
        return "" if value is None else format(value, form)

    for r in result["runs"]:
        lines.append(f"| {r['seed']} | {show(r['steps'], 'd')} | {show(r['seconds_per_step'], '.0f')} | "
                     f"{show(r['before'], '.1%')} | {show(r['after'], '.1%')} | {r['change'] * 100:+.1f} "
                     f"[{r['ci'][0] * 100:+.1f}, {r['ci'][1] * 100:+.1f}] | {r['gained']} / {r['lost']} | "
                     f"{show(r['wall_seconds'], '.0f')} |")
    lines.append(f"mean {result['mean'] * 100:+.1f} points, range {result['lowest'] * 100:+.1f} to "
                 f"{result['highest'] * 100:+.1f}; {result['resolved']} of {len(result['runs'])} intervals exclude 0")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Store recorded runs as a notebook's reference band (add), or "
                                                 "summarize their held-out change across seeds (spread).")
    parser.add_argument("command", choices=["add", "spread"])
    parser.add_argument("notebook")
    parser.add_argument("metrics", nargs="+", help="metrics.json files of runs of that notebook")
    parser.add_argument("--machine", help="add: the machine they ran on, in words")
    parser.add_argument("--meaning", default=None, help='add: JSON {"behind": "...", "ahead": "...", "inside": "..."}')
    a = parser.parse_args(argv)
    if a.command == "spread":
        print(f"{a.notebook}, {len(a.metrics)} run(s):\n" + describe_spread(spread(a.metrics)))
    else:
        if not a.machine:
            parser.error("add needs --machine")
        add_runs(a.notebook, a.metrics, machine=a.machine, meaning=json.loads(a.meaning) if a.meaning else None)
        print(f"{REFERENCE_FILE}: {a.notebook} now has {len(a.metrics)} more run(s)", file=sys.stderr)


if __name__ == "__main__":
    main()
