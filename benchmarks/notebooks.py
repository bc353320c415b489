"""Notebooks: wall time of each notebook under PROFILE=tiny, and (optionally) of the test suite.

    python -m benchmarks.notebooks [--size tiny|full] [--with-test-suite]

Every notebook in notebooks/ is executed with papermill (tools.notebooks.run_notebook) in a
scratch folder with its own AGENT_RL_RUNS, exactly as the tests run it. A notebook that fails is
recorded with its error and the run goes on. --size tiny runs only the harness smoke notebook
(tests/notebooks/harness_smoke.ipynb), to prove the benchmark itself works.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import figures
from tools.notebooks import NOTEBOOKS_DIR, run_notebook

REPO_ROOT = Path(__file__).resolve().parent.parent
SMOKE = REPO_ROOT / "tests" / "notebooks" / "harness_smoke.ipynb"


def notebooks_for(size: str) -> list[Path]:
    return [SMOKE] if size == "tiny" else sorted(NOTEBOOKS_DIR.glob("[0-9]*.ipynb"))


def time_notebook(path: Path, work: Path) -> dict:
    runs = work / path.stem / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    saved = os.environ.get("AGENT_RL_RUNS")
    os.environ["AGENT_RL_RUNS"] = str(runs)  # inherited by the kernel
    began = time.perf_counter()
    error = None
    try:
        run_notebook(path, work / path.stem / f"{path.stem}.executed.ipynb", {"PROFILE": "tiny"},
                     cwd=work / path.stem)
    except Exception as exc:  # noqa: BLE001 - a failing notebook is a result here
        error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
    finally:
        if saved is None:
            os.environ.pop("AGENT_RL_RUNS", None)
        else:
            os.environ["AGENT_RL_RUNS"] = saved
    return {"notebook": path.stem, "wall_s": round(time.perf_counter() - began, 1), "ok": error is None,
            "error": error}


def time_test_suite() -> dict:
    began = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    tail = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
    return {"wall_s": round(time.perf_counter() - began, 1), "exit_code": proc.returncode,
            "summary": tail[0] if tail else ""}


def run(size: str = "full", with_test_suite: bool = False, log_dir: Path | None = None, out=print) -> dict:
    work = Path(log_dir or tempfile.mkdtemp(prefix="bench-notebooks-"))
    results = []
    for path in notebooks_for(size):
        result = time_notebook(path, work)
        results.append(result)
        out(f"notebook {result['notebook']:32s} {result['wall_s']:7.1f} s"
            + ("" if result["ok"] else f"  FAILED: {result['error']}"))
    summary = {"size": size, "profile": "tiny", "notebooks": results,
               "total_wall_s": round(sum(r["wall_s"] for r in results), 1)}
    if with_test_suite:
        summary["test_suite"] = time_test_suite()
        out(f"test suite: {summary['test_suite']['wall_s']} s ({summary['test_suite']['summary']})")
    return summary


def plot(result: dict, path: Path) -> Path:
    plt = figures.pyplot()
    rows = result["notebooks"]
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * max(1, len(rows))))
    colors = ["tab:blue" if r["ok"] else "tab:red" for r in rows]
    ax.barh([r["notebook"] for r in rows], [r["wall_s"] for r in rows], color=colors)
    ax.invert_yaxis()
    ax.set(xlabel="wall time (s), PROFILE=tiny", title="Notebook run times (red: failed)")
    return figures.save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=["tiny", "full"], default="full")
    parser.add_argument("--with-test-suite", action="store_true")
    args = parser.parse_args()
    print(json.dumps(run(args.size, args.with_test_suite), indent=2))


if __name__ == "__main__":
    main()
