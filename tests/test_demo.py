"""`make demo`: what it prints while a notebook runs, and the HTML report it writes.

One real papermill run of tests/notebooks/demo_smoke.ipynb (a real transformers Trainer on a tiny model, ~25 s),
watched like the demo watches notebooks 02 and 01, then the report built from what it recorded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from tools.demo import _print_output, run_watched, section_titles
from helpers.runs import load_metrics
from tools.notebooks import write_notebook
from tools.report import build_report
from tools.trainer_log import log_line

TESTS_DIR = Path(__file__).resolve().parent


def test_log_line_shows_step_loss_reward_and_time_left():
    grpo = {"loss": 0.0123, "reward": 0.25, "reward_std": 0.5, "tools/call_frequency": 0.625, "grad_norm": 1.0}
    assert log_line(grpo, 4, 36, 12.0) == ("[train] step 4/36  loss 0.0123  reward 0.25  reward std 0.5  "
                                           "tool calls 0.625  | 12 s/step, ~6.4 min left")
    assert log_line({"loss": 1.5, "mean_token_accuracy": 0.61}, 1, 5) == "[train] step 1/5  loss 1.5  token acc 0.61"
    assert log_line({"train_runtime": 3.0, "total_flos": 1.0}, 5, 5) is None  # the end-of-training summary


def test_section_titles_follow_the_headings(tmp_path):
    path = write_notebook(tmp_path / "n.ipynb", [("code", "x = 1"), ("md", "# Title\n\ntext"), ("code", "y = 2"),
                                                  ("md", "## A section\n### Its part"), ("code", "z = 3"),
                                                  ("md", "no heading here"), ("code", "w = 4")])
    assert section_titles(nbformat.read(path, as_version=4)) == ["", "Title", "Title", "Its part", "Its part",
                                                                 "Its part", "Its part"]


def test_outputs_print_as_terminal_text():
    lines = []
    stream = {"msg_type": "stream", "content": {"name": "stderr", "text": "\rbar:  10%|#  | 1/10\rbar: 100%|###| 10/10\n"
                                                                      "done\n"}}
    _print_output(stream, lines.append)
    _print_output({"msg_type": "stream", "content": {"name": "stderr", "text": "\rbar:  10%|#  | 1/10"}}, lines.append)
    _print_output({"msg_type": "display_data", "content": {"data": {"text/html": "<table>",
                   "text/plain": "<IPython.core.display.HTML object>"}}}, lines.append)
    _print_output({"msg_type": "display_data", "content": {"data": {"image/png": "...",
                   "text/plain": "<Figure size 800x300 with 2 Axes>"}}}, lines.append)
    assert lines == ["    bar: 100%|###| 10/10", "    done", "    [plot: see the report]"]


def test_a_long_progress_bar_prints_a_line_at_each_quarter():
    lines = []

    def redraw(name, done, total=10):
        text = f"\r{name}: {100 * done // total:3d}%|{'#' * done:<10}| {done}/{total}"
        _print_output({"msg_type": "stream", "content": {"name": "stderr", "text": text}}, lines.append)

    for done in range(11):
        redraw("generating", done)
        if done == 4:
            redraw("Map", 10)  # another bar in between keeps its own count
    for done in range(4):  # the same bar again (the evaluation after training): it counts from 0 again
        redraw("generating", done)
    assert [line.split("|")[0].strip() for line in lines] == [
        "generating:  30%", "Map: 100%", "generating:  50%", "generating:  80%", "generating: 100%", "generating:  30%"]


@pytest.mark.notebook
def test_watched_run_streams_progress_and_the_report_holds_metrics_and_plots(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("AGENT_RL_RUNS", str(tmp_path / "runs"))  # inherited by the kernel
    executed = tmp_path / "demo_smoke.ipynb"
    run_watched(TESTS_DIR / "notebooks" / "demo_smoke.ipynb", executed, {"PROFILE": "tiny", "STEPS": 3}, cwd=tmp_path)
    captured = capfd.readouterr()  # the kernel's own stderr included
    shown = captured.out + captured.err
    assert re.search(r"^\[0:\d\d\] cell 3/4 \| Train a tiny model$", captured.out, re.MULTILINE)
    assert re.search(r"^\[\d+:\d\d\] cell 4/4 \| Before and after$", captured.out, re.MULTILINE)
    for step in (1, 2, 3):  # the trainer's log, one line per logging step, in the stream and in the notebook
        assert re.search(rf"^    \[train\] step {step}/3  loss \d", captured.out, re.MULTILINE)
    assert "activation checkpointing: False" in captured.out
    assert "without encryption" not in shown  # ipykernel's TCP warning: the kernel runs encrypted instead
    assert "is_gradient_checkpointing" not in shown and "Executing Cell" not in shown
    assert "[plot: see the report]" in captured.out and "IPython.core.display.HTML object" not in shown
    assert "a tqdm bar" not in shown  # a progress widget: live only

    metrics = load_metrics("demo_smoke")
    report = build_report([("demo_smoke", executed, 65.0, None)], profile="tiny")
    assert report == tmp_path / "runs" / "demo" / "report.html"
    page = report.read_text()
    assert "Demo smoke notebook (tests only)" in page and "ran in 1.1 min" in page and "PROFILE=tiny" in page
    assert f"{metrics['accuracy_before']:.0%} <small>[{metrics['accuracy_ci_before'][0]:.0%}" in page
    assert f"{metrics['accuracy_after']:.0%} <small>[{metrics['accuracy_ci_after'][0]:.0%}" in page
    low, high = metrics["accuracy_change_ci"]
    assert f"<b>{metrics['accuracy_change'] * 100:+.1f} points</b> [{low * 100:+.1f}, {high * 100:+.1f}]" in page
    assert "3 gained, 0 lost: an improvement" in page and "3 of 3" in page
    assert page.count("data:image/png;base64,") == len(list((tmp_path / "runs" / "demo_smoke").glob("*.png"))) == 2
    rendered = tmp_path / "runs" / "demo" / "demo_smoke.html"
    assert "href='demo_smoke.html'" in page and rendered.exists()
    notebook_page = rendered.read_text()
    assert "[train] step 3/3" in notebook_page and "Train a tiny model" in notebook_page
    # the local dashboard frame is replaced by a line: blank in a static page, and its URL carries a token
    assert '<iframe src="http://127.0.0.1' not in notebook_page and "trackio show" in notebook_page
    assert "a tqdm bar:" not in notebook_page  # its widget's text is its first state, 0 %
    assert "write_token" in json.dumps(nbformat.read(executed, as_version=4).cells[-1].outputs)  # it was there


def test_report_of_a_failed_run_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_RL_RUNS", str(tmp_path / "runs"))
    report = build_report([("missing_nb", tmp_path / "missing.ipynb", 3.0, "PapermillExecutionError: boom")],
                          profile="cpu")
    page = report.read_text()
    assert "Failed: PapermillExecutionError: boom" in page and "was not written" in page and "PROFILE=tiny" not in page


def test_the_report_of_a_run_stopped_for_too_few_steps_gives_the_reason_and_no_change():
    """Notebook 01 on a CPU far too slow for MIN_STEPS stops after three steps and skips its evaluation after
    training: the report says why and shows no "after" numbers or paired change (they would read +0.0)."""
    from tools.report import eval_table, key_facts

    reason = "STOPPED after 3 steps: on this machine a step takes 60 s, ..."
    metrics = {"steps_planned": 80, "steps_run": 3, "seconds_per_step": 60.1, "stopped_too_few_steps": reason,
               "accuracy_before": 0.5, "accuracy_ci_before": [0.47, 0.53], "accuracy_after": 0.5,
               "accuracy_ci_after": [0.47, 0.53], "accuracy_change": 0.0, "accuracy_change_ci": [0.0, 0.0], "eval_n": 900}
    assert ("training stopped", reason) in key_facts(metrics)
    table = eval_table(metrics)
    assert "not evaluated" in table and "Paired change" not in table and "50%" in table
    trained = {**metrics, "stopped_too_few_steps": None, "accuracy_after": 0.55, "accuracy_change": 0.05,
               "accuracy_change_ci": [0.02, 0.08]}
    assert "Paired change" in eval_table(trained) and "not evaluated" not in eval_table(trained)


# --- the banner's minutes: the page's range for this class, then this machine's own speed -------------------------

def _median_idle(notebook: str, hardware: str) -> float:
    from statistics import median

    from helpers.reporting import results

    return median(results.idle_minutes(results.load_runs()["runs"], notebook, hardware))


@pytest.mark.parametrize("hardware", ["cpu-avx512", "cpu-avx2"])
def test_before_anything_ran_the_banner_quotes_the_page_for_this_class(hardware):
    from tools import results
    from tools.demo import banner_minutes

    for notebook in ("02_sft_warmup", "01_grpo_walkthrough"):
        said = banner_minutes(notebook, "cpu", {}, hardware)
        figure = re.search(r"(?:about|up to) (\S+) minutes on 2 (?:idle )?cores of a `([\w-]+)` machine", said)
        assert figure, said
        row = next(r for r in results.render().split(f"## Notebook {notebook[:2]}\n", 1)[1].splitlines()
                   if r.startswith(f"| `{figure.group(2)}` | `cpu` as shipped"))
        assert figure.group(1) in row.split("|")[-2], (said, row)
        assert figure.group(2) == hardware or f"not timed on a `{hardware}` one" in said, said


def test_after_notebook_02_ran_the_banner_estimates_01_from_this_machines_speed():
    """A machine twice as slow as the measured runs on notebook 02: notebook 01's minutes outside its 20-minute
    training budget double, the budget itself does not (the machine trains fewer steps in it)."""
    from tools.demo import banner_minutes

    hw = "cpu-avx512"
    slow = banner_minutes("01_grpo_walkthrough", "cpu", {"02_sft_warmup": 2 * 60 * _median_idle("02_sft_warmup", hw)}, hw)
    expected = 20 + 2 * (_median_idle("01_grpo_walkthrough", hw) - 20)
    assert f"about {expected:.0f} min here" in slow and "(x2.00)" in slow, slow
    assert "its 20-minute training budget does not scale" in slow and "notebook 02 took" in slow
    same = banner_minutes("01_grpo_walkthrough", "cpu", {"02_sft_warmup": 60 * _median_idle("02_sft_warmup", hw)}, hw)
    assert f"about {_median_idle('01_grpo_walkthrough', hw):.0f} min here" in same and "(x1.00)" in same, same
    # a notebook without a budget scales whole; 01's own time counts only outside its budget
    after_01 = banner_minutes("04_openreward_spec", "cpu",
                              {"01_grpo_walkthrough": 60 * (20 + 1.5 * (_median_idle("01_grpo_walkthrough", hw) - 20))}, hw)
    assert f"about {1.5 * _median_idle('04_openreward_spec', hw):.0f} min here" in after_01 and "(x1.50)" in after_01


def test_the_demo_builds_the_offline_models_before_timing_a_notebook(monkeypatch, capsys):
    from helpers import model_folders
    from tools import demo

    built = []
    monkeypatch.setattr(model_folders, "resolve_model", lambda name: built.append(name) or name)
    demo.build_models_first(["02_sft_warmup", "01_grpo_walkthrough"], "cpu")
    assert built == ["smollm2-135m"]


def test_the_estimate_is_within_15_percent_on_the_measured_machines_that_ran_both():
    """Replayed on every commit whose runs include an idle notebook 02 and an idle notebook 01 of the same machine
    (the Zen 5 of 0edfc93, the Zen 4 of the regenerated reference runs): the banner's estimate of 01 from 02's
    minutes lands within 15 % of what 01 took there (in-sample: those runs are among the medians it uses)."""
    from statistics import mean

    from helpers.reporting import results
    from tools.demo import estimate_minutes, speed_here

    records = results.load_runs()["runs"]
    idle = lambda nb: [r for r in results.shipped_runs(records, nb, "cpu-avx512") if r.get("timing") == "idle"]
    pairs = [(two, [one for one in idle("01_grpo_walkthrough") if one.get("commit") == two.get("commit")])
             for two in idle("02_sft_warmup")]
    pairs = [(two, ones) for two, ones in pairs if ones]
    assert len(pairs) >= 2, pairs
    for two, ones in pairs:
        ratio, _ = speed_here({"02_sft_warmup": 60 * results.minutes_of(two)}, records, "cpu-avx512")
        estimate, budget = estimate_minutes("01_grpo_walkthrough", ratio, records, "cpu-avx512")
        took = mean(results.minutes_of(one) for one in ones)
        assert budget == 20 and abs(estimate - took) <= 0.15 * took, (two["commit"], estimate, took)
