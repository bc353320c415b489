"""The two lines a learner gets when a workshop goes off the rails: notebook 01 run before notebook 02 (no SFT
checkpoint yet), and a notebook started while another notebook's kernel still holds the cores."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from helpers.compute import threads
from helpers.compute.threads import busy_machine, busy_python_processes


# --- notebook 01 before notebook 02 -----------------------------------------------------------------------------

def test_notebook_01_before_02_prints_one_line_saying_so_and_what_to_do(tmp_path, monkeypatch, capsys):
    from helpers.models import warm_start
    monkeypatch.setenv("AGENT_RL_RUNS", str(tmp_path))
    path, said = warm_start("01_grpo_walkthrough", "some/hub-model")
    out = capsys.readouterr().out
    assert path == "some/hub-model" and said.endswith("(base, no warm start)")
    assert out.count("\n") == 1, out                                   # one line
    for part in ("notebook 01 runs before notebook 02 here", str(tmp_path / "02_sft_warmup" / "checkpoint"),
                 "starts from the base model", "run notebook 02 first", "notebooks/02_sft_warmup.ipynb",
                 "docs/results.md#notebook-02", "then restart this notebook", "WARM_START = False"):
        assert part in out, (part, out)


# --- another notebook holds the cores ---------------------------------------------------------------------------

def test_an_idle_machine_says_nothing():
    assert busy_machine(load=0.4, cores=2, processes=[]) is None
    assert busy_machine(load=1.4, cores=2, processes=[(7, "ipykernel", 1.9)]) is None   # under 0.75 of the cores


def test_another_kernel_on_two_cores_is_named_with_the_slowdown_and_what_to_do():
    line = busy_machine(load=2.1, cores=2, processes=[(4242, "ipykernel", 1.9)])
    assert line.count("\n") == 0
    assert line.startswith("WARNING: another notebook seems to be running: ipykernel pid 4242 (1.9 cores) of 2 cores")
    assert "expect this notebook to be about 1.9x slower" in line     # (2 + 1.9) / 2
    assert "finish or stop it first" in line and "Kernel > Shut Down" in line


def test_without_proc_the_load_average_alone_speaks(tmp_path):
    """A Mac (no /proc): the 1-minute load average is all there is."""
    line = busy_machine(load=2.0, cores=2, proc_root=str(tmp_path / "no-proc"))
    assert "the cores are busy: load average 2.0 on 2 cores (another notebook may be running)" in line
    assert "about 2.0x slower" in line and "finish or stop" in line


def test_a_busy_machine_without_a_python_culprit_says_so():
    line = busy_machine(load=3.0, cores=2, processes=[])
    assert "load average 3.0 on 2 cores, not a python process" in line and "about 2.5x slower" in line


def test_busy_processes_leave_out_this_kernel_its_parents_and_children():
    before = {10: ("jupyter", 1, 0), 20: ("ipykernel", 10, 0), 21: ("python", 20, 0),
              30: ("ipykernel", 10, 0), 40: ("pytest", 1, 0), 50: ("python", 1, 0)}
    after = {10: ("jupyter", 1, 100), 20: ("ipykernel", 10, 100), 21: ("python", 20, 100),
             30: ("ipykernel", 10, 90), 40: ("pytest", 1, 20), 50: ("python", 1, 60), 60: ("python", 1, 999)}
    busy = busy_python_processes(before, after, 1.0, me=20, ticks_per_s=100)
    # 10: my Jupyter server, 21: my own server child, 40: 0.2 cores (under 0.5), 60: new, no earlier sample
    assert busy == [(30, "ipykernel", 0.9), (50, "python", 0.6)]


def test_proc_is_read_for_python_processes_with_their_kind():
    if not os.path.isdir("/proc"):
        pytest.skip("no /proc here")
    found = threads._python_processes()
    kind, ppid, ticks = found[os.getpid()]
    with open("/proc/self/cmdline", "rb") as f:   # an xdist worker runs as `python -c ...`, not as pytest
        expected = "pytest" if b"pytest" in f.read() else "python"
    assert kind == expected and ppid == os.getppid() and ticks >= 0


def test_a_real_busy_python_process_is_found(monkeypatch):
    """A detached python loop (not this process's child: its parent exits) is seen through /proc as busy.

    How much of a core the loop gets depends on the machine: beside a notebook on the other xdist worker it can
    get under BUSY_CORES (0.5) of one in a wall-clock second. So the window handed to `busy_python_processes` is
    the CPU time the loop got in it, read from the kernel's scheduler (/proc/<pid>/schedstat, nanoseconds), not
    from the ticks in /proc/<pid>/stat that `_python_processes` reads: the two agree (cores ~1.0, idle or loaded)
    whatever share the loop got, and a parse of the wrong /proc fields still reads as not busy."""
    if not os.path.isdir("/proc"):
        pytest.skip("no /proc here")
    code = ("import os, sys, time\nif os.fork(): sys.exit(0)\nprint(os.getpid(), flush=True)\n"
            "end = time.time() + 300\nwhile time.time() < end: pass\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pid = int(proc.stdout.readline())
    proc.wait()

    def cpu_seconds():   # the loop's time on a CPU so far, by the scheduler's clock
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9

    try:
        if not os.path.exists(f"/proc/{pid}/schedstat"):
            pytest.skip("no /proc/<pid>/schedstat here (a kernel without CONFIG_SCHED_INFO)")
        time.sleep(0.2)
        before, cpu_before = threads._python_processes(), cpu_seconds()
        deadline = time.monotonic() + 120
        while cpu_seconds() - cpu_before < 1.0 and time.monotonic() < deadline:   # ~1 s idle, longer when loaded
            time.sleep(0.1)
        after, used = threads._python_processes(), cpu_seconds() - cpu_before
        assert used >= 0.5, f"the loop got {used:.2f} s of CPU in 120 s"
        busy = busy_python_processes(before, after, used, ticks_per_s=os.sysconf("SC_CLK_TCK"))
        assert pid in [p for p, _, _ in busy], busy             # other kernels on this machine may show up too
        line = busy_machine(load=2.0, cores=2, processes=busy)
        assert f"pid {pid}" in line or len(busy) > 3, line
    finally:
        os.kill(pid, 9)


def test_settings_print_the_warning_once_when_the_cores_are_busy(monkeypatch, capsys):
    import helpers.profiles as profiles

    monkeypatch.setattr(profiles, "busy_machine", lambda: "WARNING: another notebook seems to be running: x")
    profiles.resolve_settings("01_grpo_walkthrough", "tiny")
    assert capsys.readouterr().out.count("another notebook seems to be running") == 1
    monkeypatch.setattr(profiles, "busy_machine", lambda: None)
    profiles.resolve_settings("01_grpo_walkthrough", "tiny")
    assert "another notebook" not in capsys.readouterr().out
