"""Is my run normal? A training curve set against the band of the project's own measured runs.

`reference_runs.json` (next to this file) holds, per notebook and profile, the curves that runs of the notebook
recorded in their metrics.json (`helpers.reporting.metrics.curves`), one per training seed, with the machine they ran on.
The band at each step is the mean and the range (lowest to highest) of those runs.

    band = reference_band("03_wordle_rollout_func", "rewards/reward_valid/mean", settings.profile)   # None: none stored
    print(where_run_sits(trainer.state.log_history, band))   # inside, ahead or behind, and what that means
    training_curves(log_history, keys, reference={key: band})                         # the band under the curve

A maintainer adds runs with `python -m helpers.reporting.reference add NOTEBOOK runs/.../metrics.json ... --machine "..."`;
`python -m helpers.reporting.reference spread NOTEBOOK metrics.json ...` tabulates their held-out change across seeds.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from helpers.reporting.plots import series

REFERENCE_FILE = Path(__file__).with_name("reference_runs.json")

# What a position usually means, for any notebook; a notebook's stored "meaning" adds its own line.
MEANINGS = {
    "inside": "a normal run: the measured runs looked like this too.",
    "ahead": "above every measured run: good news if the held-out evaluation agrees; if it does not, read the "
             "alarms (a reward that climbs alone is often a reward being gamed).",
    "behind": "below every measured run: the usual causes are a weaker start (the warm start, the checkpoint), "
              "a changed recipe (temperature, learning rate, steps) or a reward that is never paid "
              "(frac_reward_zero_std near 1).",
}


@dataclass
class Band:
    """The reference runs' `key` per step: mean, lowest and highest, from `runs` recorded runs."""

    notebook: str
    profile: str
    key: str
    steps: list[int]
    mean: list[float]
    low: list[float]
    high: list[float]
    runs: int
    machine: str
    meaning: dict

    def label(self) -> str:
        return f"reference: {self.runs} runs ({self.profile})"


@dataclass
class Verdict:
    position: str     # inside | ahead | behind | unknown
    message: str

    def __str__(self) -> str:
        return self.message


def load_references(path: Path = REFERENCE_FILE) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def reference_band(notebook: str, key: str, profile: str, *, path: Path = REFERENCE_FILE) -> Band | None:
    """The band of `key` over the stored runs of `notebook`'s `profile`, or None when none are stored."""
    entry = load_references(path).get(notebook, {}).get(profile)
    if not entry:
        return None
    curves = [run["curves"] for run in entry["runs"] if key in run["curves"]]
    if not curves:
        return None
    steps, mean, low, high = [], [], [], []
    for step in sorted({s for c in curves for s in c["step"]}):
        values = [c[key][c["step"].index(step)] for c in curves if step in c["step"]]
        values = [v for v in values if v is not None]
        if len(values) == len(curves):   # a step every run reached: the band is the runs' spread there
            steps.append(step)
            mean.append(sum(values) / len(values))
            low.append(min(values))
            high.append(max(values))
    return Band(notebook, profile, key, steps, mean, low, high, len(curves), entry.get("machine", ""),
                entry.get("meaning", {}))


def where_run_sits(log_history: list[dict], band: Band | None, *, label: str | None = None) -> Verdict:
    """Where the run's `band.key` sits against the band over the second half of the steps both have: inside the
    reference runs' range, ahead of all of them or behind all of them (means over those steps), and what it means.
    The stored runs logged every step; a run logging every N steps compares its N-step means, which wander less."""
    if band is None:
        return Verdict("unknown", f"{label + ': ' if label else ''}no reference runs stored for this notebook and "
                                  "profile, nothing to compare with.")
    run = dict(zip(*series(log_history, band.key)))   # step -> value
    shared = [i for i, step in enumerate(band.steps) if step in run]
    if not shared:
        return Verdict("unknown", f"the run logged no {band.key} at the reference runs' steps.")
    half = shared[len(shared) // 2:]
    ours = sum(run[band.steps[i]] for i in half) / len(half)
    low = sum(band.low[i] for i in half) / len(half)
    high = sum(band.high[i] for i in half) / len(half)
    # compared as printed (two decimals): a run shown inside the printed range is never called ahead or behind
    ours, low, high = round(ours, 2), round(low, 2), round(high, 2)
    position = "ahead" if ours > high else "behind" if ours < low else "inside"
    name = label or band.key
    lines = [f"{name}, steps {band.steps[half[0]]}-{band.steps[half[-1]]}: this run {ours:.2f}, the {band.runs} "
             f"reference runs {low:.2f}-{high:.2f} -> {position.upper()}: {MEANINGS[position]}"]
    if band.meaning.get(position):
        lines.append(f"  here: {band.meaning[position]}")
    return Verdict(position, "\n".join(lines))


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


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Store recorded runs as a notebook's reference band (add), or "
                                                 "summarize their held-out change across seeds (spread).")
    parser.add_argument("command", choices=["add", "spread"])
    parser.add_argument("notebook")
    parser.add_argument("metrics", nargs="+", help="metrics.json files of runs of that notebook")
    parser.add_argument("--machine", help="add: the machine they ran on, in words")
    parser.add_argument("--meaning", default=None, help='add: JSON {"behind": "...", "ahead": "...", "inside": "..."}')
    a = parser.parse_args()
    if a.command == "spread":
        print(f"{a.notebook}, {len(a.metrics)} run(s):\n" + describe_spread(spread(a.metrics)))
    else:
        if not a.machine:
            parser.error("add needs --machine")
        add_runs(a.notebook, a.metrics, machine=a.machine, meaning=json.loads(a.meaning) if a.meaning else None)
        print(f"{REFERENCE_FILE}: {a.notebook} now has {len(a.metrics)} more run(s)", file=sys.stderr)
