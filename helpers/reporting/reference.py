"""Is my run normal? A training curve set against the band of the project's own measured runs.

`reference_runs.json` (next to this file) holds, per notebook and profile, the curves that runs of the notebook
recorded in their metrics.json (`helpers.reporting.metrics.curves`), one per training seed, with the machine they ran on.
The band at each step is the mean and the range (lowest to highest) of those runs.

    band = reference_band("03_wordle_rollout_func", "rewards/reward_valid/mean", settings.profile)   # None: none stored
    print(where_run_sits(trainer.state.log_history, band))   # inside, ahead or behind, and what that means
    training_curves(log_history, keys, reference={key: band})                         # the band under the curve

A maintainer adds runs with `python -m tools.reference_band add NOTEBOOK runs/.../metrics.json ... --machine "..."`;
`python -m tools.reference_band spread NOTEBOOK metrics.json ...` tabulates their held-out change across seeds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from helpers.reporting.plots import series
from helpers.reporting.results import expected_change

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
    measured = expected_change(band.notebook, band.profile)   # the numbers of docs/results.md, from one source
    if measured:
        lines.append(f"  {measured}")
    return Verdict(position, "\n".join(lines))
