"""The reference band (helpers.reporting.reference): stored runs' curves -> band -> where a run sits, and the plot."""

from __future__ import annotations

import json

import pytest

from helpers.reporting.metrics import curves
from helpers.reporting.plots import training_curves
from helpers.reporting.reference import REFERENCE_FILE, load_references, reference_band, where_run_sits
from tools.reference_band import add_runs

KEY = "rewards/reward_valid/mean"


def log_of(values, key=KEY):
    """A trainer log_history with one logged step per value, as GRPOTrainer writes it (plus the final summary)."""
    return [{"step": i + 1, "loss": 0.0, "reward": v, key: v} for i, v in enumerate(values)] + [
        {"step": len(values), "train_runtime": 1.0, "train_loss": 0.0}]


@pytest.fixture
def stored(tmp_path):
    path = tmp_path / "reference_runs.json"
    runs = []
    for seed, values in enumerate(([0.5, 0.6, 0.7, 0.8], [0.4, 0.5, 0.6, 0.7], [0.6, 0.7, 0.8, 0.9, 1.0])):
        metrics = tmp_path / f"seed{seed}.json"
        metrics.write_text(json.dumps({"profile": "cpu", "seed": seed, "curves": curves(log_of(values))}))
        runs.append(str(metrics))
    add_runs("nb", runs, machine="test machine", meaning={"behind": "check the warm start"}, path=path)
    return path


def test_the_band_is_the_runs_range_at_the_steps_every_run_reached(stored):
    band = reference_band("nb", KEY, "cpu", path=stored)
    assert band.runs == 3 and band.steps == [1, 2, 3, 4]   # the third run's step 5 is not shared
    assert band.low == pytest.approx([0.4, 0.5, 0.6, 0.7]) and band.high == pytest.approx([0.6, 0.7, 0.8, 0.9])
    assert band.mean == pytest.approx([0.5, 0.6, 0.7, 0.8])
    assert band.machine == "test machine" and load_references(stored)["nb"]["cpu"]["runs"][2]["seed"] == 2


@pytest.mark.parametrize("values, position", [
    ([0.5, 0.6, 0.75, 0.75], "inside"), ([0.5, 0.6, 0.95, 1.0], "ahead"), ([0.5, 0.5, 0.3, 0.3], "behind")])
def test_a_run_sits_inside_ahead_or_behind_over_the_second_half(stored, values, position):
    verdict = where_run_sits(log_of(values), reference_band("nb", KEY, "cpu", path=stored), label="valid")
    assert verdict.position == position
    assert verdict.message.startswith("valid, steps 3-4: this run") and position.upper() in verdict.message
    assert ("here: check the warm start" in verdict.message) == (position == "behind")


def test_a_run_printed_inside_the_range_is_never_behind_or_ahead(stored):
    """The verdict compares what it prints (two decimals): notebook 04's executed reference run printed "this run 0.95,
    the reference runs 0.95-0.99 -> BEHIND" (unrounded, its mean was a hair under the band's). A value that prints
    at either end is inside; one that prints outside is still behind or ahead."""
    band = reference_band("nb", KEY, "cpu", path=stored)   # second half: steps 3-4, range 0.65-0.85
    for values, position in (([0.5, 0.6, 0.6451, 0.6451], "inside"), ([0.5, 0.6, 0.8549, 0.8549], "inside"),
                             ([0.5, 0.6, 0.6449, 0.6449], "behind"), ([0.5, 0.6, 0.62, 0.62], "behind"),
                             ([0.5, 0.6, 0.88, 0.88], "ahead")):
        verdict = where_run_sits(log_of(values), band)
        assert verdict.position == position, (values, verdict.message)


def test_every_stored_reference_run_sits_inside_its_own_band():
    """Replayed, each run the band is made of is inside it, for every key it logged."""
    for notebook, profiles in load_references(REFERENCE_FILE).items():
        for profile, entry in profiles.items():
            for run in entry["runs"]:
                for key in (k for k in run["curves"] if k != "step"):
                    log = [{"step": step, "loss": 0.0, key: value}
                           for step, value in zip(run["curves"]["step"], run["curves"][key]) if value is not None]
                    verdict = where_run_sits(log, reference_band(notebook, key, profile))
                    assert verdict.position in ("inside", "unknown"), (notebook, profile, run["seed"], key, verdict.message)


def test_no_reference_says_so_and_the_plot_draws_the_band(stored, tmp_path):
    assert reference_band("other", KEY, "cpu", path=stored) is None and reference_band("nb", "reward_x", "cpu", path=stored) is None
    assert where_run_sits(log_of([0.1, 0.2]), None).position == "unknown"
    band = reference_band("nb", KEY, "cpu", path=stored)
    fig = training_curves(log_of([0.5, 0.6, 0.7]), [KEY], reference={KEY: band}, save_to=tmp_path / "c.png")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["reference: 3 runs (cpu)", "this run"]
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_a_run_without_curves_is_refused(tmp_path):
    metrics = tmp_path / "m.json"
    metrics.write_text(json.dumps({"profile": "cpu"}))
    with pytest.raises(ValueError, match="holds no curves"):
        add_runs("nb", [str(metrics)], machine="m", path=tmp_path / "r.json")


def test_the_stored_references_are_three_seeds_or_more_with_their_machine():
    for notebook, profiles in load_references(REFERENCE_FILE).items():
        for profile, entry in profiles.items():
            assert len({run["seed"] for run in entry["runs"]}) >= 3, (notebook, profile)
            assert entry["machine"]


def test_spread_tabulates_the_held_out_change_across_seeds(tmp_path):
    """What notebook 01's "what to expect" quotes: each seed's paired change and interval, the mean, the range and
    how many intervals exclude 0, read from the runs' own metrics.json keys."""
    from tools.reference_band import describe_spread, spread

    paths = []
    for seed, change, ci in ((0, 0.076, [0.038, 0.113]), (1, -0.016, [-0.056, 0.025]), (2, 0.05, [0.01, 0.09])):
        path = tmp_path / f"s{seed}.json"
        path.write_text(json.dumps({"seed": seed, "accuracy_change": change, "accuracy_change_ci": ci,
                                    "accuracy_before": 0.5, "accuracy_after": 0.5 + change, "steps_run": 25,
                                    "seconds_per_step": 48.0, "questions_gained": 57, "questions_lost": 23}))
        paths.append(str(path))
    result = spread(paths)
    assert result["mean"] == pytest.approx(0.11 / 3) and (result["lowest"], result["highest"]) == (-0.016, 0.076)
    assert result["resolved"] == 2 and [r["resolved"] for r in result["runs"]] == [True, False, True]
    assert describe_spread(result).splitlines()[-1] == "mean +3.7 points, range -1.6 to +7.6; 2 of 3 intervals exclude 0"
    stopped = tmp_path / "stopped.json"   # a run that stopped before it trained has no change to average
    stopped.write_text(json.dumps({"seed": 3, "accuracy_change": None, "accuracy_change_ci": None,
                                   "stopped_too_few_steps": "STOPPED after 3 steps"}))
    with pytest.raises(ValueError, match="stopped.json records no accuracy_change: its training stopped early"):
        spread(paths + [str(stopped)])


@pytest.mark.parametrize("machine", ["cpu-avx512", "cpu-avx2"])
def test_the_numbers_a_verdict_prints_are_the_results_pages(machine, monkeypatch):
    """Issue 77: a number a notebook prints about the measured runs comes from docs/runs.json through the code that
    writes docs/results.md (helpers.reporting.results), never from text typed into a band's meaning, so the two
    cannot drift (notebook 01 once printed "mean +8.3" where the page said +7.5). The verdict quotes the runs of the
    machine's own class (the AVX-512 CPUs' where that class has none): both classes, whatever CPU runs the test (it
    once assumed an AVX-512 bf16 CPU and failed on a Xeon without bf16)."""
    import re

    from helpers.reporting import results
    from helpers.reporting.results import RUNS_FILE, change_text, load_runs, shipped_summary

    monkeypatch.setattr(results, "hardware_class", lambda: machine)
    page, records = (RUNS_FILE.parent / "results.md").read_text(), load_runs()["runs"]
    for notebook, by_profile in load_references().items():
        for profile, entry in by_profile.items():
            for position, text in entry.get("meaning", {}).items():   # names and links only: no typed numbers
                assert not re.search(r"\d", re.sub(r"notebook \d\d|pass@\d|docs/\S+", "", text)), (notebook, position)
            key = sorted(entry["runs"][0]["curves"].keys() - {"step"})[0]
            band = reference_band(notebook, key, profile)
            verdict = where_run_sits([{"step": step, key: 0.5} for step in band.steps], band).message
            where, shipped = next((where, summary) for where in dict.fromkeys((machine, "cpu-avx512"))
                                  if (summary := shipped_summary(records, notebook, where, profile=profile))
                                  and summary["mean"] is not None)
            assert f"as shipped on `{where}`: " in verdict, verdict
            assert change_text(shipped) in verdict and f"| {change_text(shipped)} |" in page


def test_a_noisy_curve_is_drawn_with_its_rolling_mean_and_the_paired_change_beside_the_bars(tmp_path):
    """Issue 77: notebook 01's reward jumps between 0 and 1 (one or two groups a step), so 8 or more steps are drawn
    as faint points under their rolling mean, the band smoothed alike; short runs (tiny) keep their plain line. The
    before/after bars carry the paired change, which resolves what two overlapping intervals do not."""
    from helpers.reporting.intervals import PairedChange
    from helpers.reporting.plots import before_after_bars, rolling_mean, smoothing_window

    assert rolling_mean([0, 1, 0, 1], 2) == [0, 0.5, 0.5, 0.5] and smoothing_window(7) == 1
    assert smoothing_window(8) == 3 and smoothing_window(80) == 8
    values = [float(i % 2) for i in range(40)]
    fig = training_curves(log_of(values), [KEY], save_to=tmp_path / "c.png")
    lines = fig.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["this run, rolling mean over 4 steps", "each step"]
    assert list(lines[0].get_ydata())[3:] == [0.5] * 37 and lines[1].get_alpha() == 0.3
    assert [line.get_label() for line in training_curves(log_of([0.5, 0.6]), [KEY]).axes[0].get_lines()] == ["this run"]

    change = PairedChange(n=900, change=0.054, ci=(0.026, 0.082), gained=80, lost=31)
    before, after = {"accuracy": 0.49, "accuracy_ci": (0.46, 0.52)}, {"accuracy": 0.54, "accuracy_ci": (0.51, 0.57)}
    fig = before_after_bars(before, after, {"accuracy": "Accuracy"}, paired={"accuracy": change})
    assert fig.axes[0].get_xticklabels()[0].get_text() == "Accuracy\npaired +5.4 [+2.6, +8.2]"
