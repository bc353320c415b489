"""Executed reference runs: what a real run of each notebook looks like, kept under docs/reference-runs/.

    python -m tools.reference_runs                          # every notebook, PROFILE=cpu, 02 before 01
    python -m tools.reference_runs --notebooks 04_openreward_spec
    python -m tools.reference_runs --check                  # the index matches runs.json, every page is there

Each notebook runs with papermill (with progress, as `make demo` does) in a runs folder of its own
(runs/reference/), so notebook 01 starts from the notebook 02 checkpoint this same command trained. What is kept:
the executed notebook as one HTML page (no notebook with outputs is committed), and a record in
docs/reference-runs/runs.json (machine, date, commit, minutes, load) from which the index page is generated.
Nothing is edited by hand; a page over MAX_BYTES is refused rather than committed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from tools.notebooks import NOTEBOOKS_DIR, REPO_ROOT, numbered_notebooks

OUT_DIR = REPO_ROOT / "docs" / "reference-runs"
RECORDS = OUT_DIR / "runs.json"
INDEX = OUT_DIR / "README.md"
MAX_BYTES = 5 * 2**20   # per page: a reference run is read in a browser, not downloaded
ORDER = ["00_openenv_quickstart", "02_sft_warmup", "01_grpo_walkthrough", "03_wordle_rollout_func",
         "04_openreward_spec"]   # 02 trains the checkpoint 01 starts from


def machine() -> str:
    """This CPU as a learner would compare it with theirs: model, cores, the vector units that decide precision."""
    model, flags, info = platform.processor() or platform.machine(), set(), {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    if info:
        model = info.get("model name", model)
        if "cpu family" in info:   # a virtual machine may name only the vendor ("AMD EPYC")
            model += f" (family {info['cpu family']}, model {info.get('model', '?')})"
        flags = set(info.get("flags", "").split())
    return f"{model}, {os.cpu_count()} cores, {vector_units(flags)}" if flags else f"{model}, {os.cpu_count()} cores"


def vector_units(flags: set[str]) -> str:
    """The vector units that decide a CPU's precision, from its /proc/cpuinfo flags. AVX-512 without BF16 is its own
    case: a Xeon may expose one without the other (it trains in fp32, like an AVX2-only CPU)."""
    if "avx512_bf16" in flags:
        return "AVX-512 BF16"
    if "avx512f" in flags:
        return "AVX-512 without BF16"
    return "AVX2 only" if "avx2" in flags else "no AVX2"


def commit() -> str:
    """HEAD, marked when the working tree differs from it outside docs/reference-runs/ (which this command writes:
    the second notebook would otherwise be marked by the first one's page)."""
    def git(*args):
        return subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", f":!{OUT_DIR.relative_to(REPO_ROOT)}")
    return head + (" (with uncommitted changes)" if changed else "")


def scrubbed(executed: Path):
    """The executed notebook without what only works while its kernel runs (the demo report's cleaning, every
    widget dropped), its widget state too."""
    import nbformat

    from tools.report import without_live_outputs

    nb = without_live_outputs(nbformat.read(str(executed), as_version=4), drop_all_widgets=True)
    nb.metadata.pop("widgets", None)
    return nb


def keep(name: str, executed: Path, record: dict, out_dir: Path = OUT_DIR) -> dict:
    """Write `name`'s executed run as one HTML page into `out_dir` (no notebook with outputs is committed);
    refuse it when over MAX_BYTES."""
    import nbformat

    from tools.report import render_notebook

    out_dir.mkdir(parents=True, exist_ok=True)
    clean, page = executed.with_suffix(".clean.ipynb"), out_dir / f"{name}.html"
    nbformat.write(scrubbed(executed), str(clean))
    render_notebook(clean, page)
    size = page.stat().st_size
    if size > MAX_BYTES:
        page.unlink()
        raise SystemExit(f"{name}: {size} bytes, over {MAX_BYTES // 2**20} MiB; a reference run must stay small enough "
                         "to read in a browser (fewer printed rollouts or smaller plots in the notebook)")
    return {**record, "bytes": {page.name: size}}


def measured(name: str, record: dict, runs: list[dict]) -> dict | None:
    """The docs/runs.json record of this kept run (the same notebook and whole-run seconds), or None."""
    return next((r for r in runs if r["notebook"] == name and r.get("wall_s") == record.get("seconds")), None)


def change_cells(name: str, record: dict, runs: list[dict]) -> tuple[str, str]:
    """What this run changed held-out, and what the page's measured runs of its class changed beside it (a run
    that gained nothing is shown as it is, next to the range it sits in or outside)."""
    from helpers.reporting import results
    from tools.results import NOTEBOOKS   # the notebooks that train, as the results page lists them

    if name not in NOTEBOOKS:
        return "trains nothing", ""
    mine = measured(name, record, runs)
    if mine is None:
        return "not in docs/runs.json", ""
    if mine.get("change") is None:
        change = mine.get("outcome", "no change logged")
    else:
        change = f"{results.fmt_change(mine['change'])} [{results.fmt_change(mine['ci'][0])}, " \
                 f"{results.fmt_change(mine['ci'][1])}] ({mine['metric']})"
    summary = results.shipped_summary(runs, name, mine["hardware"])
    page = (f"{results.change_text(summary)}, {summary['runs']} run{'s' * (summary['runs'] > 1)} on "
            f"`{mine['hardware']}`") if summary else ""
    return change, page


def index(records: dict, runs: list[dict] | None = None) -> str:
    """docs/reference-runs/README.md, from runs.json (and docs/runs.json, where each run is recorded)."""
    from helpers.reporting import results

    runs = results.load_runs()["runs"] if runs is None else runs
    lines = ["# Reference runs: what a run looks like",
             "",
             "<!-- Generated by `python -m tools.reference_runs` from runs.json: do not edit by hand. -->",
             "",
             "Each notebook run for real with `PROFILE=\"cpu\"` (the offline SmolLM2-135M, local servers), executed top to",
             "bottom by `python -m tools.reference_runs` and kept with its outputs: the rollouts, the curves, the",
             "before/after numbers. Open one while your own run trains, or instead of it on a machine too slow to",
             "finish: each is one HTML page (open it in a browser). Each run is one of the measured runs of",
             "[results.md](../results.md), whose range over all of them (seeds and machines) stands beside it: one run",
             "is one draw, shown as it came out. (The line a run prints with what the measured runs gained was",
             "computed before that run was recorded among them.)",
             "",
             "| notebook | run | minutes | held-out change [95 %] | the page's runs of its class | machine | date | commit |",
             "|---|---|---:|---|---|---|---|---|"]
    for name in ORDER:
        r = records.get(name)
        if not r:
            continue
        load = f" (load {r['load_before']:.1f} -> {r['load_after']:.1f})" if "load_before" in r else ""
        change, page = change_cells(name, r, runs)
        lines.append(f"| {name} | [{name}.html]({name}.html) | {r['seconds'] / 60:.1f} | {change} | {page} | "
                     f"{r['machine']}{load} | {r['date']} | {r['commit']} |")
    return "\n".join(lines) + "\n"


def stale(out_dir: Path = OUT_DIR, runs: list[dict] | None = None) -> list[str]:
    """What is wrong with the kept runs: a page missing or too large, a training run not recorded in docs/runs.json,
    an index that does not match runs.json."""
    records_path, index_path = out_dir / RECORDS.name, out_dir / INDEX.name
    if not records_path.exists():
        return [f"{records_path} is missing: run python -m tools.reference_runs"]
    records = json.loads(records_path.read_text())
    problems = [f"{name}: {name}.html missing" for name in records if not (out_dir / f"{name}.html").exists()]
    problems += [f"{p.name}: {p.stat().st_size} bytes, over {MAX_BYTES}" for p in out_dir.glob("*.html")
                 if p.stat().st_size > MAX_BYTES]
    problems += [f"{p.name}: a notebook with outputs; the kept run is its HTML page" for p in out_dir.glob("*.ipynb")]
    if runs is None:
        from helpers.reporting.results import load_runs
        runs = load_runs()["runs"]
    problems += [f"{name}: its run is not recorded in docs/runs.json (add a record with wall_s {r['seconds']})"
                 for name, r in records.items() if change_cells(name, r, runs)[0] == "not in docs/runs.json"]
    if not index_path.exists() or index_path.read_text() != index(records, runs):
        problems.append(f"{index_path} does not match runs.json: run python -m tools.reference_runs --index")
    return problems


def main(argv=None) -> int:
    from tools.demo import run_watched

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notebooks", default=",".join(ORDER), help="comma-separated, run in this order")
    parser.add_argument("--check", action="store_true", help="only check the kept runs and the index")
    parser.add_argument("--index", action="store_true", help="only rewrite the index from runs.json")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale()
        print("\n".join(problems) or "reference runs: up to date")
        return 1 if problems else 0
    records = json.loads(RECORDS.read_text()) if RECORDS.exists() else {}
    if not args.index:
        names = args.notebooks.split(",")
        known = {p.stem for p in numbered_notebooks()}
        unknown = [n for n in names if n not in known]
        if unknown:
            parser.error(f"no notebook {unknown} in {NOTEBOOKS_DIR}; known: {', '.join(sorted(known))}")
        runs = REPO_ROOT / "runs" / "reference"
        os.environ["AGENT_RL_RUNS"] = str(runs)   # the kernels inherit it: 01 finds the checkpoint 02 wrote here
        for name in names:
            executed = runs / "executed" / f"{name}.ipynb"
            executed.parent.mkdir(parents=True, exist_ok=True)
            load_before, started = os.getloadavg()[0], time.perf_counter()
            print(f"\n=== {name} (PROFILE=cpu) ===", flush=True)
            run_watched(NOTEBOOKS_DIR / f"{name}.ipynb", executed, {"PROFILE": "cpu"})
            record = {"profile": "cpu", "seconds": round(time.perf_counter() - started),
                      "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
                      "machine": machine(), "date": time.strftime("%Y-%m-%d"), "commit": commit(),
                      "python": sys.version.split()[0]}
            records[name] = keep(name, executed, record)
            RECORDS.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")   # kept as each one ends
            print(f"=== {name}: {record['seconds'] / 60:.1f} min, kept in {OUT_DIR} ===", flush=True)
    INDEX.parent.mkdir(parents=True, exist_ok=True)
    INDEX.write_text(index(records))
    print(f"index: {INDEX}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
