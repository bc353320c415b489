"""`make demo`: the main job offline on a laptop — SFT warm-up (02), then GRPO from it (01) — that you can watch.

Both notebooks run with papermill under PROFILE=cpu (SmolLM2-135M, local servers, local teacher). While they
run the terminal shows which section and cell is running with the elapsed time, what each cell prints, and one
line per trainer log (step, loss, reward, time left). At the end one HTML page, runs/demo/report.html, holds
each notebook's wall time, before/after table, plots and a link to the executed notebook rendered to HTML.
`--profile tiny` is the quick dry run (tiny random models: it shows the machinery, not learning).
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from pathlib import Path

from helpers.recipes import RECIPES
from helpers.reporting import results as measured
from helpers.runs import runs_dir
from tools.notebooks import NOTEBOOKS_DIR, REPO_ROOT, check_passed_knobs

# Notebook 01 after the notebook whose checkpoint it starts from (its recipe says which, helpers.recipes).
PIPELINE = [RECIPES["01_grpo_walkthrough"].starts_from, "01_grpo_walkthrough"]

# Run silently in the kernel before the first cell: the trainer log lines (tools/trainer_log.py). (Importing
# `helpers` also silences the one deprecation notice TRL triggers: see helpers/startup.py.)
# The kernel runs in the run folder, so the repository's root (where tools/ lives, not installed) goes first.
KERNEL_SETUP = f"""
import sys
sys.path.insert(0, {str(REPO_ROOT)!r})
from tools.trainer_log import print_every_log
print_every_log()
"""

# A text progress bar (tqdm) is redrawn in place many times a second; the terminal gets a line at each quarter
# (25, 50, 75 and 100 %), so a four-minute evaluation shows that it moves without flooding the screen.
_TQDM = re.compile(r"(?P<name>[^\r]*?)(?P<percent>\d+)%\|")
_bar_shown: dict[str, int] = {}  # bar name -> the last percentage printed


def _bar_line_worth_showing(line: str) -> bool:
    """True for a line that is not a progress bar, or a bar that reached its next quarter."""
    match = _TQDM.search(line)
    if not match:
        return True
    name, percent = match["name"].strip(), int(match["percent"])
    last = _bar_shown.get(name, 0)
    if percent < last:  # a new bar under the same name
        last = 0
    if percent // 25 > last // 25:
        _bar_shown[name] = 0 if percent == 100 else percent
        return True
    _bar_shown[name] = last
    return False


def section_titles(nb) -> list[str]:
    """For each cell, the last markdown heading at or above it ("" before the first heading)."""
    titles, current = [], ""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            headings = [line.lstrip("#").strip() for line in cell.source.splitlines() if re.match(r"#{1,6} ", line)]
            current = headings[-1] if headings else current
        titles.append(current)
    return titles


def _print_output(msg: dict, out=print) -> None:
    """What a cell's output message looks like as terminal text (figures and HTML widgets named, not dumped)."""
    kind, content = msg["msg_type"], msg["content"]
    if kind == "stream":
        for line in content["text"].splitlines():
            line = line.rsplit("\r", 1)[-1].rstrip()
            if line and _bar_line_worth_showing(line):
                out(f"    {line}")
    elif kind in ("display_data", "execute_result"):
        data = content.get("data", {})
        if "application/vnd.jupyter.widget-view+json" in data:  # a live widget (tqdm's notebook bar): no text
            return
        if "image/png" in data:
            out("    [plot: see the report]")
        elif "text/plain" in data and not data["text/plain"].startswith("<IPython.core.display"):
            for line in data["text/plain"].splitlines():
                out(f"    {line}")
    elif kind == "error":
        out(f"    {content['ename']}: {content['evalue']}")


def _kernel_config():
    """Encrypt the kernel's local channels (CurveZMQ) where jupyter_client and the kernelspec support it.

    ipykernel 7.4 warns "Kernel is running over TCP without encryption" at every start otherwise; jupyter_client
    8.10's `transport_encryption="auto"` provisions the keys when the kernelspec declares `curve` support, which
    ipykernel's does. Where it is not supported nothing changes.
    """
    import zmq
    from traitlets.config import Config

    return Config({"KernelManager": {"transport_encryption": "auto"}}) if zmq.has("curve") else Config()


def _watched_engine() -> str:
    """Register (once) and name a papermill engine that prints what runs as it runs."""
    from papermill.clientwrap import PapermillNotebookClient
    from papermill.engines import NBClientEngine, papermill_engines
    from papermill.log import logger
    from papermill.utils import remove_args

    class WatchedClient(PapermillNotebookClient):
        """papermill's client, announcing each code cell (section, elapsed time) and printing its output."""

        def papermill_execute_cells(self):
            reply = self.wait_for_reply(self.kc.execute(KERNEL_SETUP, silent=True, store_history=False))
            if reply["content"]["status"] != "ok":
                raise RuntimeError(f"demo kernel set-up failed: {reply['content'].get('evalue')}")
            titles = section_titles(self.nb)
            code = [i for i, c in enumerate(self.nb.cells) if c.cell_type == "code"]
            started = time.monotonic()
            for index, cell in enumerate(self.nb.cells):  # papermill's loop, plus the header line
                if cell.cell_type == "code":
                    seconds = time.monotonic() - started
                    title = f" | {titles[index]}" if titles[index] else ""
                    print(f"[{seconds // 60:.0f}:{seconds % 60:02.0f}] cell {code.index(index) + 1}/{len(code)}{title}",
                          flush=True)
                try:
                    self.nb_man.cell_start(cell, index)
                    self.execute_cell(cell, index)
                except CellExecutionError as exc:
                    self.nb_man.cell_exception(self.nb.cells[index], cell_index=index, exception=exc)
                    break
                finally:
                    self.nb_man.cell_complete(self.nb.cells[index], cell_index=index)

        def process_message(self, msg, cell, cell_index):
            _print_output(msg)
            return super().process_message(msg, cell, cell_index)

    class WatchedEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, start_timeout=60, execution_timeout=None, **kwargs):
            kwargs = remove_args(["input_path", "timeout", "startup_timeout", "log_output"], **kwargs)
            client = WatchedClient(nb_man, kernel_name=kernel_name, timeout=execution_timeout,
                                   startup_timeout=start_timeout, log=logger, config=_kernel_config(), **kwargs)
            return client.execute()

    from nbclient.exceptions import CellExecutionError

    papermill_engines.register("watched", WatchedEngine)
    return "watched"


def run_watched(source: str | Path, executed: str | Path, parameters: dict, *, cwd=None):
    """Execute `source` into `executed` with papermill, printing progress as it goes; returns the notebook."""
    import papermill

    check_passed_knobs(source, parameters)
    return papermill.execute_notebook(str(source), str(executed), parameters=parameters, engine_name=_watched_engine(),
                               kernel_name="python3", progress_bar=False, cwd=str(cwd) if cwd else None,
                               execution_timeout=None)  # training cells run for minutes: no per-cell limit


# --- how long the next notebook will take here --------------------------------------------------------------------

def speed_here(took: dict[str, float], records: list[dict], hardware: str, profile: str = "cpu"):
    """How this machine compares with the measured idle runs of its class (docs/runs.json), from the notebooks it
    already ran in this demo (`took`: name -> seconds): (ratio, what it rests on), ratio > 1 being slower; None
    when none of them has an idle run of its class to compare with."""
    pairs = [(name, seconds / 60, statistics.median(ref)) for name, seconds in took.items()
             for ref in [measured.idle_minutes(records, name, hardware, profile=profile)] if ref]
    if not pairs:
        return None
    ratios = []
    for name, here, ref in pairs:
        budget = training_budget(name, ref, hardware, profile)   # that part of a run does not scale
        ratios.append((here - budget) / (ref - budget) if budget and here > budget else here / ref)
    ratio = statistics.median(ratios)
    basis = "; ".join(f"notebook {name[:2]} took {here:.1f} min here, {measured.fmt_minutes(ref)} on the measured "
                      f"`{hardware}` runs" for name, here, ref in pairs)
    return ratio, basis


def estimate_minutes(name: str, ratio: float, records: list[dict], hardware: str, profile: str = "cpu"):
    """`name`'s minutes on a machine `ratio` times as slow as its class's measured idle runs (their median), and the
    training budget left unscaled when those runs trained for their whole budget (notebook 01's `TRAIN_MINUTES`:
    a slower machine trains fewer steps in it, not longer); None when the class has no idle run of `name`."""
    ref = measured.idle_minutes(records, name, hardware, profile=profile)
    if not ref:
        return None
    typical = statistics.median(ref)
    budget = training_budget(name, typical, hardware, profile)
    return (budget or 0) + (typical - (budget or 0)) * ratio, budget


def training_budget(name: str, typical: float, hardware: str, profile: str) -> float | None:
    """`name`'s training budget in minutes when its measured runs (their median, `typical` whole minutes) took
    longer than it, so trained until it ran out (notebook 01's 20 minutes); else None (04's 25-minute cap is never
    reached)."""
    budget = measured.shipped_profile(name, profile, hardware).get("train_minutes") if name in RECIPES else None
    return budget if budget and typical > budget else None


def banner_minutes(name: str, profile: str, took: dict[str, float], hardware: str | None = None,
                   records: list[dict] | None = None) -> str:
    """What a notebook's banner says of its minutes: the measured range for this machine's class (docs/results.md)
    until a notebook has run here; then an estimate from this machine's own speed, saying what it rests on."""
    if name not in RECIPES or not measured.RUNS_FILE.exists():
        return ""
    hardware = hardware or measured.hardware_class()
    records = records if records is not None else measured.load_runs()["runs"]
    speed = speed_here(took, records, hardware, profile)
    estimate = estimate_minutes(name, speed[0], records, hardware, profile) if speed else None
    if estimate is None:
        claim = measured.minutes_claim(name, profile, hardware)
        return f", {claim}: docs/results.md" if claim else ""
    minutes, budget = estimate
    fixed = f"; its {measured.fmt_minutes(budget)}-minute training budget does not scale" if budget else ""
    return f", about {minutes:.0f} min here: {speed[1]} (x{speed[0]:.2f}){fixed}"


def build_models_first(names: list[str], profile: str) -> None:
    """Build the offline models the notebooks load before any of them is timed: a fresh clone builds them inside
    the first notebook otherwise, and its minutes, which the next banner's estimate rests on, would count it."""
    from helpers.model_folders import MODEL_NAMES, resolve_model

    wanted = sorted({value for name in names if name in RECIPES
                     for key, value in RECIPES[name].profiles.get(profile, {}).items()
                     if key.endswith("model") and value in MODEL_NAMES})
    started = time.perf_counter()
    for model in wanted:
        resolve_model(model)   # at once when it is built already
    if time.perf_counter() - started > 5:
        print(f"offline models built once: {', '.join(wanted)} ({time.perf_counter() - started:.0f} s)", flush=True)


def main() -> None:
    from tools.report import build_report

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu", choices=["tiny", "cpu", "gpu"])
    parser.add_argument("--notebooks", default=",".join(PIPELINE),
                        help=f"comma-separated, run in this order (default: {','.join(PIPELINE)})")
    args = parser.parse_args()
    names = args.notebooks.split(",")
    for name in names:
        if not (NOTEBOOKS_DIR / f"{name}.ipynb").exists():
            parser.error(f"no notebook {name!r} in {NOTEBOOKS_DIR}")
    out = runs_dir() / "executed"
    out.mkdir(parents=True, exist_ok=True)
    runs = []  # (name, executed notebook, wall seconds, error or None): one section each in the report
    build_models_first(names, args.profile)
    for n, name in enumerate(names, 1):
        took = {done: seconds for done, _, seconds, error in runs if error is None}
        print(f"\n=== notebook {n}/{len(names)}: {name} (PROFILE={args.profile}"
              + banner_minutes(name, args.profile, took) + ") ===", flush=True)
        executed, started = out / f"{name}.ipynb", time.perf_counter()
        print("starting a Python kernel and importing transformers ...", flush=True)
        try:
            run_watched(NOTEBOOKS_DIR / f"{name}.ipynb", executed, {"PROFILE": args.profile})
        except Exception as exc:  # the executed copy holds the traceback: report what ran, then fail
            runs.append((name, executed, time.perf_counter() - started, f"{type(exc).__name__}: {exc}"))
            print(f"\n{name} failed; report of what ran: {build_report(runs, profile=args.profile)}")
            raise
        runs.append((name, executed, time.perf_counter() - started, None))
        print(f"=== {name} done in {(time.perf_counter() - started) / 60:.1f} min ===", flush=True)
    print(f"\nreport: {build_report(runs, profile=args.profile)}")


if __name__ == "__main__":
    main()
