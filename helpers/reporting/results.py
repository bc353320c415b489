"""What the project's measured runs showed, per notebook and hardware class: the numbers of docs/results.md.

docs/runs.json holds one record per measured run; this module summarizes them (mean, range and count of the held-out
change, steps, minutes) for `python -m tools.results`, which writes docs/results.md, and for a notebook that prints
what measured runs gained, so a number a learner reads has one source. `expected_change` is the line a notebook
prints; None where docs/runs.json is not next to the package (a non-editable install).
"""

from __future__ import annotations

import json
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from helpers.compute.hardware import cpu_native_bf16, detect_gpu
from helpers.recipes import RECIPES

RUNS_FILE = Path(__file__).resolve().parents[2] / "docs" / "runs.json"
HARDWARE_ORDER = ("cpu-avx512", "cpu-avx2", "gpu")
TIMING_WHY = {"shared": "machine shared", "older-code": "older code"}


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


def shipped_runs(records: list[dict], notebook: str, hardware: str, recipes=RECIPES, *,
                 profile: str = "cpu") -> list[dict]:
    """`notebook`'s runs of its `profile` as shipped on `hardware` (none: [])."""
    return next((runs for h, label, runs in groups(records, notebook, recipes)
                 if h == hardware and label == f"`{profile}` as shipped"), [])


def shipped_summary(records: list[dict], notebook: str, hardware: str, recipes=RECIPES, *,
                    profile: str = "cpu") -> dict | None:
    """The summary of `notebook`'s runs of its `profile` as shipped on `hardware`, or None."""
    runs = shipped_runs(records, notebook, hardware, recipes, profile=profile)
    return summarize(runs) if runs else None


def hardware_class() -> str:
    """This machine's class as docs/results.md names them: gpu, cpu-avx512 (native bf16) or cpu-avx2."""
    if detect_gpu() is not None:
        return "gpu"
    return "cpu-avx2" if cpu_native_bf16()[0] is False else "cpu-avx512"


def idle_minutes(records: list[dict], notebook: str, hardware: str, *, profile: str = "cpu") -> list[float]:
    """The whole-notebook minutes of `notebook`'s `profile` as shipped, on idle machines of `hardware`."""
    return [minutes_of(r) for r in shipped_runs(records, notebook, hardware, profile=profile)
            if r.get("timing") == "idle" and minutes_of(r) is not None]


def minutes_claim(notebook: str, profile: str = "cpu", hardware: str | None = None, *,
                  path: Path | None = None) -> str | None:
    """How long `notebook` takes, naming the class of machine it was timed on, as docs/results.md gives it: 'about
    3.7-5 minutes on 2 idle cores of a `cpu-avx512` machine' (idle runs; else 'up to' a shared run's minutes). This
    machine's class by default; the AVX-512 CPUs' when this class has no timed run, saying so. None when nothing was
    timed (or docs/runs.json is not here)."""
    source = Path(path or RUNS_FILE)
    if not source.exists():
        return None
    records = load_runs(source)["runs"]
    mine = hardware or hardware_class()
    for where in dict.fromkeys((mine, "cpu-avx512")):
        summary = shipped_summary(records, notebook, where, profile=profile)
        untimed = f", not timed on a `{mine}` one" if where != mine else ""
        on = "one card of a `gpu` machine" if where == "gpu" else f"2 {{}}cores of a `{where}` machine"
        if summary and summary["idle_minutes"]:
            return f"about {fmt_range(*summary['idle_minutes'])} minutes on {on.format('idle ')}{untimed}"
        if summary and summary["other_minutes"] is not None:   # only an upper bound: say why
            return (f"up to {fmt_minutes(summary['other_minutes'])} minutes on {on.format('')} "
                    f"({', '.join(summary['other_why'])}){untimed}")
    return None


def expected_change(notebook: str, profile: str, hardware: str | None = None, *, path: Path | None = None) -> str | None:
    """What the measured runs of `notebook`'s `profile` as shipped changed held-out on `hardware` (this machine's
    class by default; the AVX-512 CPUs' when that class has none), as docs/results.md's row says it; None when no
    run is stored (or docs/runs.json is not here)."""
    source = Path(path or RUNS_FILE)
    if not source.exists():
        return None
    records = load_runs(source)["runs"]
    for where in dict.fromkeys((hardware or hardware_class(), "cpu-avx512")):
        runs = shipped_runs(records, notebook, where, profile=profile)
        summary = summarize(runs) if runs else None
        if summary and summary["mean"] is not None:
            metric = " / ".join(fmt_metric(m) for m in sorted({r["metric"] for r in runs}))
            return (f"the {summary['runs']} measured run{'s' * (summary['runs'] > 1)} of `{profile}` as shipped on "
                    f"`{where}`: held-out change in points of {metric}, {change_text(summary)} (docs/results.md)")
    return None
