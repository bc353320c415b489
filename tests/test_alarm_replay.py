"""The run alarms (helpers.reporting.alarms) replayed on every measured run whose inputs were kept: no alarm on a run
whose held-out pair gained, and the alarms that belong still fire.

- The reference runs (helpers/reporting/reference_runs.json): per-step curves of notebooks 01 (6 seeds), 03 and 04
  (3 each), with the probe readings the docs logged (03, 04) and each run's paired held-out change. Every alarm is
  replayed as `RunWatch` raises it, step by step (`replay_alarms`).
- Notebook 01's runs whose 16-sum probe readings docs/measurements.md logged, without per-step curves
  (tests/data/alarm_replay.json): the probe alarm replayed at each reading.

tests/test_alarms.py holds the run built to hack its reward, where `reward_up_probe_down` must fire.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.reporting.alarms import LOGGED, Thresholds, probe_alarm, replay_alarms
from helpers.reporting.reference import REFERENCE_FILE, load_references

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTED = json.loads((ROOT / "tests" / "data" / "alarm_replay.json").read_text())["runs"]
STORED = [(notebook, run) for notebook, by_profile in load_references(REFERENCE_FILE).items()
          for run in by_profile["cpu"]["runs"]]

# What the replay raises on each stored run today, {kind: step}: nothing. Before the noise rules: notebook 01's seeds
# 0-3 `no_gradient` (steps 42, 22, 20, 42; three steps of two groups all alike), 04's seed 0 `saturated` (step 10);
# notebook 03's earlier seed 2 (one teacher opener, every group's games identical from step 8) `no_gradient`, which
# its runs since 2026-11-29 (each teacher game its own draw) no longer show.
EXPECTED: dict = {}

# The documented runs where the probe alarm fires: a fall that held over two readings with the reward up.
FIRES = {
    "LEARNING_RATE=2e-5, seed 0 (collapsed, stopped at step 37)": 20,          # 44 -> 19 -> 25 %
    "FREEZE_LAYERS=0, seed 0 (collapsed, stopped at step 40)": 40,              # 44 -> ... -> 19 -> 25 %
    "make demo on the AVX2 EPYC, seed 0 (reasoning_gym's partial-credit hole)": 22,   # 62 -> 50 -> 44 -> 38 %
}


def rows_of(run: dict) -> list[dict]:
    """A stored run's curves as the rows RunWatch logs ({"step", "reward", "length", ..., "groups"})."""
    curves, rows = run["curves"], []
    for i, step in enumerate(curves["step"]):
        row = {"step": step, "groups": run["groups_per_step"]}
        row.update({field: float(curves[key][i]) for field, key in LOGGED.items()
                    if key in curves and curves[key][i] is not None})
        rows.append(row)
    return rows


def gained(held_out) -> bool:
    """A paired interval above 0; `held_out` a stored run's {"change", "ci"} or a documented [change, low, high, n]."""
    if held_out is None:
        return False
    return (held_out["ci"][0] if isinstance(held_out, dict) else held_out[1]) > 0


@pytest.mark.parametrize("notebook, run", STORED, ids=[f"{nb[:2]}-seed{run['seed']}" for nb, run in STORED])
def test_the_stored_runs_raise_only_the_alarms_that_belong(notebook, run):
    fired = replay_alarms(rows_of(run), [tuple(point) for point in run.get("probe", [])])
    assert fired == EXPECTED.get((notebook, run["seed"]), {})
    if gained(run["held_out"]):
        assert fired == {}, f"{notebook} seed {run['seed']} gained {run['held_out']} and raised {fired}"


def test_every_stored_run_has_what_the_replay_needs_and_its_held_out_pair_matches_the_record():
    records = {(r["notebook"], r["profile"], r["seed"]): r
               for r in json.loads((ROOT / "docs" / "runs.json").read_text())["runs"] if r.get("reference_band")}
    assert len(STORED) == 12 and sum("probe" in run for _, run in STORED) == 6
    for notebook, run in STORED:
        record = records[(notebook, "cpu", run["seed"])]
        held = run["held_out"]
        assert (held["change"], held["ci"]) == (record["change"], record["ci"]), (notebook, run["seed"])
        assert run["groups_per_step"] == 2   # cpu recipes: 16 rollouts in groups of 8 (01, 04), 8 in groups of 4 (03)
        steps = run["curves"]["step"]
        assert all(0 <= step <= steps[-1] and 0.0 <= value <= 1.0 for step, value in run.get("probe", []))


def test_the_probe_alarm_fires_on_the_runs_whose_probe_fell_and_stayed_and_on_no_run_that_gained():
    t = Thresholds()
    assert len(DOCUMENTED) == 32
    for entry in DOCUMENTED:
        reward = tuple(entry["reward"]) if entry["reward"] else (0.0, 1.0)   # not logged: as if it rose
        probes = [tuple(point) for point in entry["probe"]]
        steps = [probes[i - 1][0] for i in range(1, len(probes) + 1) if probe_alarm(reward, probes[:i], t)]
        assert (steps[0] if steps else None) == FIRES.get(entry["run"]), entry["run"]
        if gained(entry["held_out"]):
            assert not steps, entry["run"]
    assert sum(gained(entry["held_out"]) for entry in DOCUMENTED) == 19


def test_the_card_runs_single_low_reading_no_longer_fires():
    """The issue's case: a seed whose probe read 12 of 16 at the start and 6 at step 10, whose old alarm fired at
    steps 14-18 ("the policy is learning what the reward pays for, not the skill"), ended +7.6 [+4.7, +10.5]."""
    card = next(entry for entry in DOCUMENTED if "ended +7.6" in entry["run"])
    probes = [tuple(point) for point in card["probe"]]
    assert probes == [(0, 0.75), (10, 0.375)] and gained(card["held_out"])
    assert probes[0][1] - probes[1][1] >= 0.2   # what fired the one-reading rule: 6 of 16 down
    rows = [{"step": step, "reward": 0.2 if step <= 10 else 0.4} for step in range(1, 19)]
    assert replay_alarms(rows, probes) == {}
