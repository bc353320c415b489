"""Threads that share two cores without stalling each other.

OpenMP's default wait policy keeps idle worker threads spinning for a while after each parallel region. One torch
process on two cores loses nothing by it; two (a notebook kernel and an environment server, a second kernel, a
benchmark) each spin on the cores the other needs, and generation slows several-fold beside a training run
(docs/measurements.md#notebook-01). `OMP_WAIT_POLICY=PASSIVE` makes idle threads sleep. OpenMP reads it once, when
torch loads, so helpers/startup.py (which importing helpers runs first) sets it, unless already set, before any
helper imports torch, and every process started from a notebook (papermill kernels, local servers) inherits it.

A policy cannot make two notebooks share two cores for free: each trains about half as fast. `busy_machine()` says so
in one line when a notebook starts while the cores are already busy (a high load average; on Linux it names the
other python processes that use them, read from /proc; where there is no /proc, a Mac, the load average alone).

On an arm64 Mac torch's OpenMP is LLVM's libomp, which reads the same OMP_WAIT_POLICY; torch counts the efficiency
cores among its threads. Neither is measured here, and `describe` says so there.
"""

from __future__ import annotations

import os
import time

from helpers.compute.hardware import apple_silicon
from helpers.startup import POLICY


def describe(in_effect: bool) -> str:
    """One line for a notebook's first output: what the threads do, or what to do when it came too late."""
    import torch

    policy = os.environ.get("OMP_WAIT_POLICY")
    if not in_effect:
        return (f"threads: torch was imported before helpers, so OMP_WAIT_POLICY={policy} cannot take effect here; "
                "restart the kernel and import helpers first (a second torch process on these cores would stall both)")
    mac = ""
    if apple_silicon():
        mac = ("; Apple Silicon: libomp reads the same policy, and torch's thread count includes the efficiency "
               "cores (not measured here: if steps are slow, try torch.set_num_threads(<performance cores>))")
    return (f"threads: torch uses {torch.get_num_threads()} of {os.cpu_count()} cores; OMP_WAIT_POLICY={policy} "
            f"({'idle threads sleep, so a second kernel or a server on these cores does not stall this one' if policy.upper() == POLICY else 'your choice'})"
            + mac)


# --- is another notebook already using the cores? ----------------------------------------------------------------

BUSY_LOAD = 0.75       # a 1-minute load average at or above this share of the cores counts as busy
BUSY_CORES = 0.5       # another python process using at least this many cores is named
SAMPLE_S = 0.3         # how long /proc is watched to see which processes use the cores


def _python_processes(proc_root: str = "/proc") -> dict[int, tuple[str, int, int]]:
    """pid -> (what it is, parent pid, CPU ticks so far) for every python process /proc lists ({} without /proc)."""
    found = {}
    try:
        entries = [e for e in os.scandir(proc_root) if e.name.isdigit()]
    except OSError:
        return found
    for entry in entries:
        try:
            with open(os.path.join(entry.path, "stat"), "rb") as f:
                stat = f.read().decode(errors="replace")
            with open(os.path.join(entry.path, "cmdline"), "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        name = stat[stat.find("(") + 1:stat.rfind(")")]
        if not (name.startswith("python") or (argv and "python" in os.path.basename(argv[0]))):
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        try:
            ppid, ticks = int(fields[1]), int(fields[11]) + int(fields[12])
        except (IndexError, ValueError):
            continue
        line = " ".join(argv)
        kind = next((k for k in ("ipykernel", "papermill", "pytest", "jupyter") if k in line), "python")
        found[int(entry.name)] = (kind, ppid, ticks)
    return found


def busy_python_processes(before: dict, after: dict, seconds: float, *, me: int | None = None,
                          ticks_per_s: float = 100.0) -> list[tuple[int, str, float]]:
    """(pid, kind, cores used) of the python processes that used at least BUSY_CORES cores between two
    `_python_processes` snapshots `seconds` apart, leaving out `me`, its parents and its children."""
    me = os.getpid() if me is None else me

    def line(pid):   # pid, its parent, ... as far as the snapshot's python processes go
        seen = []
        while pid in after and pid not in seen:
            seen.append(pid)
            pid = after[pid][1]
        return seen

    parents = set(line(me))   # me and the Jupyter server that started me: its other kernels still count
    busy = []
    for pid, (kind, ppid, ticks) in after.items():
        if pid in parents or me in line(pid) or pid not in before:   # me, my parents, my children (servers)
            continue
        cores = (ticks - before[pid][2]) / ticks_per_s / seconds
        if cores >= BUSY_CORES:
            busy.append((pid, kind, round(cores, 1)))
    return sorted(busy, key=lambda b: -b[2])


def busy_machine(*, load: float | None = None, cores: int | None = None, processes=None,
                 proc_root: str = "/proc") -> str | None:
    """One line when the cores are already busy as a notebook starts (most often: another notebook's kernel still
    training), saying how much slower this one will be and what to do; None on an idle machine.

    `load` (the 1-minute load average), `cores` and `processes` (the `busy_python_processes` list) replace what this
    machine reports: tests use them. Without os.getloadavg (Windows) it says nothing."""
    cores = cores or os.cpu_count() or 1
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):
            return None
    if load < BUSY_LOAD * cores:
        return None
    if processes is None and os.path.isdir(proc_root):
        ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        before = _python_processes(proc_root)
        time.sleep(SAMPLE_S)
        processes = busy_python_processes(before, _python_processes(proc_root), SAMPLE_S, ticks_per_s=ticks)
    if processes:
        used = sum(c for _, _, c in processes)
        who = ", ".join(f"{kind} pid {pid} ({c:g} cores)" for pid, kind, c in processes[:3])
        what = f"another notebook seems to be running: {who} of {cores} cores"
        stop = "finish or stop it first (its tab: Kernel > Shut Down Kernel, or kill the pid)"
    else:
        used = load
        what = (f"the cores are busy: load average {load:.1f} on {cores} cores"
                + (", not a python process" if processes == [] else
                   " (another notebook may be running)"))
        stop = "finish or stop what runs there first (another notebook: Kernel > Shut Down Kernel)"
    slower = (cores + min(used, cores * 4)) / cores
    return (f"WARNING: {what}; expect this notebook to be about {slower:.1f}x slower while it runs "
            f"(docs/workshop.md#failure-modes-and-fixes): {stop}.")
