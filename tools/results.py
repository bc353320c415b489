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
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from helpers.recipes import CARD_RECIPES, RECIPES

REPO_ROOT = Path(__file__).resolve().parent.parent
RUNS_FILE = REPO_ROOT / "docs" / "runs.json"
RESULTS_FILE = REPO_ROOT / "docs" / "results.md"

NOTEBOOKS = ("01_grpo_walkthrough", "02_sft_warmup", "03_wordle_rollout_func", "04_openreward_spec")
HARDWARE_ORDER = ("cpu-avx512", "cpu-avx2", "gpu")
TIMING_WHY = {"shared": "machine shared", "older-code": "older code"}

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


def load_runs(path: Path | None = None) -> dict:
    return json.loads(Path(path or RUNS_FILE).read_text())


def knob(name: str) -> str:
    """A recipe key as a learner sets it in the parameters cell."""
    return name.upper()


def show_value(value) -> str:
    """A recipe value as a learner would type it: 'smollm2-135m', 0.7, 1e-5."""
    if isinstance(value, float) and value and abs(value) < 1e-3:
        mantissa, exponent = f"{value:e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return repr(value) if isinstance(value, str) else str(value)


def shipped_profile(notebook: str, profile: str, hardware: str, recipes=RECIPES) -> dict:
    """The profile as it runs on `hardware`: on an AVX2-only CPU (no native bf16) the cpu profile takes the recipe's
    `slow_cpu` changes, as `helpers.profiles.resolve_settings` applies them."""
    values = dict(recipes[notebook].profiles[profile])
    if profile == "cpu" and hardware == "cpu-avx2":
        values.update(recipes[notebook].slow_cpu)
    return values


def recipe_label(record: dict, recipes=RECIPES) -> str:
    """`cpu` as shipped when the run's recipe values are the profile's today (on its hardware), else the knobs that
    differ."""
    shipped = shipped_profile(record["notebook"], record["profile"], record["hardware"], recipes)
    plain = recipes[record["notebook"]].profiles[record["profile"]]
    # a record lists the knobs its run set; the others had the plain profile's values (a run before `slow_cpu`)
    ran = {**{k: plain[k] for k in shipped if k in plain and shipped[k] != plain[k]}, **record.get("recipe", {})}
    changed = [f"{knob(k)}={show_value(v)}" for k, v in ran.items() if shipped.get(k) != v]
    return f"`{record['profile']}` as shipped" if not changed else f"`{record['profile']}`, " + ", ".join(changed)


def minutes_of(record: dict) -> float | None:
    if record.get("wall_s") is not None:
        return record["wall_s"] / 60
    return record.get("minutes")


def fmt_minutes(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".") if value < 9.95 else f"{value:.0f}"


def fmt_range(low: float, high: float) -> str:
    a, b = fmt_minutes(low), fmt_minutes(high)
    return a if a == b else f"{a}-{b}"


def fmt_change(value: float) -> str:
    """Points with one decimal, halves rounded away from zero as the log rounds them (+7.65 -> +7.7)."""
    rounded = Decimal(repr(round(value, 9))).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)
    return f"{rounded:+.1f}"


def fmt_metric(metric: str) -> str:
    """'held-out accuracy, 900 sums' -> 'held-out accuracy (900 sums)'."""
    what, _, on = metric.partition(", ")
    return f"{what} ({on})" if on else what


def fmt_ci(ci) -> str:
    return "" if ci is None else f" [{ci[0]:+.1f}, {ci[1]:+.1f}]"


def resolved(record: dict) -> bool:
    """Its 95 % interval excludes 0 (a gain or a loss that is more than noise)."""
    ci = record.get("ci")
    return ci is not None and (ci[0] > 0 or ci[1] < 0)


def summarize(records: list[dict]) -> dict:
    """What a group of runs shows: the held-out change's mean, range and count (runs that logged one), how many
    intervals exclude 0, the steps, and the whole-notebook minutes (idle runs; the rest as an upper bound)."""
    changes = [r["change"] for r in records if r.get("change") is not None]
    steps = [r["steps"] for r in records if r.get("steps") is not None]
    idle = [minutes_of(r) for r in records if r.get("timing") == "idle" and minutes_of(r) is not None]
    other = [(minutes_of(r), r["timing"]) for r in records if r.get("timing") != "idle" and minutes_of(r) is not None]
    slower = [(m, t) for m, t in other if not idle or m > max(idle)]   # what an "up to" bound stands for
    return {
        "runs": len(records), "with_change": len(changes),
        "mean": sum(changes) / len(changes) if changes else None,
        "lowest": min(changes) if changes else None, "highest": max(changes) if changes else None,
        "resolved": sum(resolved(r) for r in records if r.get("change") is not None),
        "steps": (min(steps), max(steps)) if steps else None,
        "idle_minutes": (min(idle), max(idle)) if idle else None,
        "other_minutes": max(m for m, _ in other) if other else None,
        "other_why": sorted({TIMING_WHY[t] for _, t in slower}),
        "outcomes": [r["outcome"] for r in records if r.get("change") is None and r.get("outcome")],
    }


def minutes_text(s: dict) -> str:
    """'31-34' on idle machines; '84; up to 97 (machine shared)' with slower, shared runs; 'up to 15 (...)'."""
    parts = []
    if s["idle_minutes"]:
        parts.append(fmt_range(*s["idle_minutes"]))
    if s["other_minutes"] is not None and (not s["idle_minutes"] or s["other_minutes"] > s["idle_minutes"][1]):
        parts.append(f"up to {fmt_minutes(s['other_minutes'])} ({', '.join(s['other_why'])})")
    return "; ".join(parts) or "not timed alone"


def change_text(s: dict) -> str:
    if s["mean"] is None:
        return "; ".join(s["outcomes"]) or "no held-out change logged"
    text = fmt_change(s["mean"])
    if s["with_change"] > 1:
        text = f"mean {text} ({fmt_change(s['lowest'])} to {fmt_change(s['highest'])})"
    if s["outcomes"]:
        text += "; also " + "; ".join(s["outcomes"])
    return text


def groups(records: list[dict], notebook: str, recipes=RECIPES) -> list[tuple[str, str, list[dict]]]:
    """(hardware, recipe label, runs) for one notebook: hardware in HARDWARE_ORDER, the shipped recipe first."""
    found: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        if r["notebook"] == notebook:
            found.setdefault((r["hardware"], recipe_label(r, recipes)), []).append(r)
    return sorted(((h, label, runs) for (h, label), runs in found.items()),
                  key=lambda g: (HARDWARE_ORDER.index(g[0]), "as shipped" not in g[1], g[1]))


def shipped_summary(records: list[dict], notebook: str, hardware: str, recipes=RECIPES) -> dict | None:
    """The summary of `notebook`'s runs of its `cpu` profile as shipped on `hardware`, or None."""
    for h, label, runs in groups(records, notebook, recipes):
        if h == hardware and label == "`cpu` as shipped":
            return summarize(runs)
    return None


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
