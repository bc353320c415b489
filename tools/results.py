"""Generate docs/results.md, what a run of each notebook shows on each kind of hardware, from stored runs.

    python -m tools.results            # rewrite docs/results.md from docs/runs.json and helpers/recipes.py
    python -m tools.results --check    # exit 1 when docs/results.md differs from what this would write

docs/runs.json holds one record per measured run (transcribed from docs/measurements.md, the dated log, and
helpers' reference_runs.json); helpers.recipes holds each notebook's recipe. The page is computed from both: a
row per hardware class and recipe, with the mean, range and count of the runs' held-out change and their
minutes, so no number on it is typed by hand. Add a measured run to docs/runs.json and regenerate;
tests/test_results.py fails when the page is stale or a claim elsewhere disagrees with it.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

from helpers.recipes import CARD_RECIPES, RECIPES
# the summaries are helpers': a notebook prints the same numbers this page shows (expected_change)
from helpers.reporting.results import (HARDWARE_ORDER, TIMING_WHY, change_text, fmt_change, fmt_metric,
                                      fmt_minutes, fmt_range, groups, knob, load_runs, minutes_of, minutes_text,
                                      recipe_label, shipped_summary, show_value, summarize)

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_FILE = REPO_ROOT / "docs" / "results.md"

NOTEBOOKS = ("01_grpo_walkthrough", "02_sft_warmup", "03_wordle_rollout_func", "04_openreward_spec")

# The recipe values a learner reads first, per notebook (the rest: helpers/recipes.py).
KEY_VALUES = {
    "01_grpo_walkthrough": ("model", "temperature", "learning_rate", "max_steps", "train_minutes", "min_steps",
                            "eval_n"),
    "02_sft_warmup": ("model", "n_episodes", "num_train_epochs", "learning_rate", "freeze_layers", "eval_n"),
    "03_wordle_rollout_func": ("model", "teacher_games", "max_steps", "temperature", "learning_rate", "eval_games"),
    "04_openreward_spec": ("model", "teacher_episodes", "teacher_calculate_share", "max_steps", "train_minutes",
                           "temperature", "learning_rate", "eval_tasks"),
}
# The Colab row: the card class a free Colab runtime gets (helpers.compute.hardware.card_class), with no run measured there.
COLAB = ("Colab T4", "16gb")


def reference_file() -> Path:
    """helpers' reference_runs.json: the curves drawn as the band under a training curve."""
    from helpers.reporting.reference import REFERENCE_FILE

    return Path(REFERENCE_FILE)












def fmt_ci(ci) -> str:
    return "" if ci is None else f" [{ci[0]:+.1f}, {ci[1]:+.1f}]"








def demo_minutes(records: list[dict], recipes=RECIPES) -> str | None:
    """`make demo` (notebook 02, then 01, `cpu`) on idle AVX-512 cores: the two shipped rows' idle minutes summed."""
    first = shipped_summary(records, "02_sft_warmup", "cpu-avx512", recipes)
    second = shipped_summary(records, "01_grpo_walkthrough", "cpu-avx512", recipes)
    if not (first and second and first["idle_minutes"] and second["idle_minutes"]):
        return None
    return fmt_range(first["idle_minutes"][0] + second["idle_minutes"][0],
                     first["idle_minutes"][1] + second["idle_minutes"][1])


def key_values(notebook: str, profile: str, recipes=RECIPES) -> str:
    values = recipes[notebook].profiles[profile]
    return ", ".join(f"{knob(k)}={show_value(values[k])}" for k in KEY_VALUES[notebook] if k in values)


def reference_counts(path: Path | None = None) -> dict[str, dict[str, list]]:
    """notebook -> profile -> the seeds of the runs stored as its reference band."""
    path = path or reference_file()
    data = json.loads(Path(path).read_text()) if Path(path).exists() else {}
    return {nb: {profile: [run.get("seed") for run in entry.get("runs", [])] for profile, entry in by.items()}
            for nb, by in data.items()}


def fmt_also(record: dict) -> str:
    """A run's other held-out measures, each with as many decimals as its log gave."""
    texts = []
    for a in record.get("also", []):
        values = [a["change"], *(a.get("ci") or [])]
        decimals = max(len(repr(float(v)).split(".")[1]) for v in values)
        show = [f"{v:+.{decimals}f}" for v in values]
        texts.append(f"{a['metric']} {show[0]}" + (f" [{show[1]}, {show[2]}]" if len(show) == 3 else ""))
    return "; ".join(texts)


def fmt_moved(record: dict) -> str:
    before, after = record.get("before"), record.get("after")
    if before is not None and after is not None:
        return f"{before:g} % -> {after:g} %"
    if before is not None:
        return f"from {before:g} %"
    return "" if after is None else f"{after:g} % after"


def run_rows(runs: list[dict], recipes=RECIPES) -> list[str]:
    rows = ["| hardware | recipe | date | seed | steps | before -> after | change [95 %] | minutes | machine, notes |",
            "|---|---|---|---:|---:|---|---|---:|---|"]
    for r in runs:
        moved = fmt_moved(r)
        change = r.get("outcome", "") if r.get("change") is None else fmt_change(r["change"]) + fmt_ci(r.get("ci"))
        if r.get("also"):
            change += f"; {fmt_also(r)}"
        minutes = minutes_of(r)
        shown = "" if minutes is None else fmt_minutes(minutes) + ("" if r["timing"] == "idle" else
                                                                   f" ({TIMING_WHY[r['timing']]})")
        notes = r["machine"] + (f"; {r['notes']}" if r.get("notes") else "") + (
            "; in the reference band" if r.get("reference_band") else "") + (
            f"; commit {r['commit']}" if r.get("commit") else "")
        rows.append(f"| `{r['hardware']}` | {recipe_label(r, recipes)} | {r['date']} | {r['seed']} | "
                    f"{r.get('steps', '')} | {moved} | {change} | {shown} | {notes} |")
    return rows


def one_line(notebook: str, records: list[dict], recipes=RECIPES) -> str | None:
    """The sentence a notebook's "what to expect" can quote: the shipped `cpu` recipe on the AVX-512 CPUs."""
    s = shipped_summary(records, notebook, "cpu-avx512", recipes)
    if not s or s["mean"] is None:
        return None
    metric = {r["metric"] for r in records if r["notebook"] == notebook and r["hardware"] == "cpu-avx512"}
    runs = f"{s['with_change']} run{'s' * (s['with_change'] > 1)}"
    spread = (f"{fmt_change(s['mean'])} points on average ({fmt_change(s['lowest'])} to {fmt_change(s['highest'])}, "
              f"{runs}, {s['resolved']} with an interval excluding 0)" if s["with_change"] > 1
              else f"{fmt_change(s['mean'])} points (1 run)")
    steps = fmt_range(*s["steps"]) if s["steps"] else "?"
    minutes = (f"{fmt_range(*s['idle_minutes'])} minutes on an idle machine" if s["idle_minutes"]
               else f"{minutes_text(s)} minutes")
    return (f"On 2 cores of an AVX-512 CPU the `cpu` profile trains {steps} steps and changes "
            f"{' / '.join(fmt_metric(m) for m in sorted(metric))} by {spread}; the whole notebook takes {minutes}.")


def render(data: dict | None = None, recipes=RECIPES, references: dict | None = None) -> str:
    data = load_runs() if data is None else data
    references = reference_counts() if references is None else references
    records = data["runs"]
    out = [
        "# Results: what a run shows, per notebook and hardware",
        "",
        "<!-- Generated by `python -m tools.results` from docs/runs.json and helpers/recipes.py: do not edit by hand. -->",
        "",
        textwrap.fill(
            "What the project's measured runs of each notebook showed, computed from [runs.json](runs.json) (one "
            "record per measured run) and the recipes in `helpers/recipes.py`: nothing here is typed by hand. "
            "`python -m tools.results` rewrites this page; `python -m tools.results --check` (run by "
            "tests/test_results.py) fails when it is stale. The dated log behind every run, with the machines, the "
            "commits and everything else that was tried: [measurements.md](measurements.md).", 115),
        "",
        textwrap.fill(
            "**How to read a row.** *Change* is the paired held-out change in points: the same questions (games, "
            "tasks) scored before and after training, so the start's difficulty cancels out; each run also has a 95 % "
            "interval (in the runs list), and *excluding 0* counts the runs whose interval says the change is more "
            "than noise. The row gives the mean and the range over its runs. *Minutes* is the whole notebook on an "
            "idle machine; a time taken while another job shared the machine, or before a later speed-up, is only "
            "an upper bound and says so. *Recipe* is the profile as `helpers/recipes.py` ships it today, or the "
            "knobs the runs changed. A row marked *estimated, not measured* has no run behind it.", 115),
        "",
        "Hardware classes:",
        "",
    ]
    for name in HARDWARE_ORDER:
        out.append(f"- `{name}`: {data['hardware'][name]}.")
    out.append(f"- {COLAB[0]}: a free Colab runtime's card (16 GB); with a GPU the notebooks pick the `gpu` profile.")
    demo = demo_minutes(records, recipes)
    if demo:
        avx2 = [shipped_summary(records, nb, "cpu-avx2", recipes) for nb in ("02_sft_warmup", "01_grpo_walkthrough")]
        out += ["", textwrap.fill(
            f"**`make demo`** (notebook 02, then 01, `cpu`): {demo} minutes on 2 idle cores of an AVX-512 CPU (the "
            "two notebooks' shipped rows below, summed), plus about 3 minutes to install the first time. On an "
            "AVX2-only CPU, in minutes: notebook 02 " + (minutes_text(avx2[0]) if avx2[0] else "not measured")
            + "; notebook 01 " + (minutes_text(avx2[1]) if avx2[1] else "not measured as shipped (its rows below)")
            + ".", 115)]
    for notebook in NOTEBOOKS:
        out += ["", f"## Notebook {notebook[:2]}", "",
                f"[{notebook}](../notebooks/{notebook}.ipynb). Recipe (`helpers/recipes.py`), `cpu`: "
                f"{key_values(notebook, 'cpu', recipes)}; `gpu`: {key_values(notebook, 'gpu', recipes)}."
                + (f" On a CPU without native bf16 (`cpu-avx2`) the `cpu` profile changes "
                   + ", ".join(f"{knob(k)}={show_value(v)}" for k, v in recipes[notebook].slow_cpu.items()) + "."
                   if recipes[notebook].slow_cpu else "")]
        metrics = sorted({r["metric"] for r in records if r["notebook"] == notebook})
        if metrics:
            out += ["", "The held-out change is in points of " + "; ".join(fmt_metric(m) for m in metrics) + "."]
        out += ["", "| hardware | recipe | runs | held-out change (points) | excluding 0 | steps | minutes |",
                "|---|---|---:|---|---|---|---|"]
        runs_here = []
        for hardware, label, runs in groups(records, notebook, recipes):
            s = summarize(runs)
            runs_here += runs
            steps = fmt_range(*s["steps"]) if s["steps"] else ""
            excluding = f"{s['resolved']} of {s['with_change']}" if s["with_change"] else ""
            out.append(f"| `{hardware}` | {label} | {s['runs']} | {change_text(s)} | {excluding} | {steps} | "
                       f"{minutes_text(s)} |")
        if not any(r["hardware"] == "gpu" and r["profile"] == "gpu" for r in runs_here):
            card = CARD_RECIPES[COLAB[1]]
            changes = ", ".join(f"{knob(k)}={show_value(v)}" for k, v in card.items())
            out.append(f"| {COLAB[0]} | `gpu` on a 16 GB card: {changes} | 0 | **estimated, not measured** | | | "
                       "not measured |")
        line = one_line(notebook, records, recipes)
        if line:
            out += ["", f"**In one line:** {line}"]
        seeds = references.get(notebook, {})
        if seeds:
            out += ["", "Reference band (`helpers/reference_runs.json`, drawn under the training curve): " + "; ".join(
                f"`{profile}` {len(s)} runs (seeds {', '.join(str(x) for x in s)})" for profile, s in seeds.items())
                + "."]
        out += ["", f"<details><summary>The {len(runs_here)} runs</summary>", ""] + run_rows(runs_here, recipes) + [
            "", "</details>"]
    out += ["", "For the dated log of every run, and what was tried and not adopted: "
                "[docs/measurements.md](measurements.md).", ""]
    return "\n".join(out)


def stale(path: Path | None = None) -> bool:
    path = path or RESULTS_FILE
    return not path.exists() or path.read_text() != render()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=textwrap.dedent(__doc__).split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/results.md is stale instead of writing")
    args = parser.parse_args(argv)
    if args.check:
        if stale():
            print(f"{RESULTS_FILE.relative_to(REPO_ROOT)} is stale. Regenerate with: python -m tools.results")
            return 1
        return 0
    RESULTS_FILE.write_text(render())
    print("wrote", RESULTS_FILE.relative_to(REPO_ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
