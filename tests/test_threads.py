"""helpers sets OpenMP's wait policy before torch loads, keeps a user's own choice, and says when it came too late."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def _run(code: str, **env) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env={**clean, **env}, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_importing_helpers_makes_idle_threads_sleep_and_the_profile_says_so():
    out = _run("import helpers, os; from helpers.profiles import resolve_settings\n"
               "print(os.environ['OMP_WAIT_POLICY'], helpers.THREADS_IN_EFFECT)\n"
               "resolve_settings('01_grpo_walkthrough', 'tiny')")
    assert out.startswith("PASSIVE True")
    assert "OMP_WAIT_POLICY=PASSIVE (idle threads sleep" in out


def test_a_users_own_policy_is_kept():
    out = _run("import helpers, os; print(os.environ['OMP_WAIT_POLICY'], helpers.THREADS_IN_EFFECT)",
               OMP_WAIT_POLICY="ACTIVE")
    assert out.strip() == "ACTIVE True"


def test_torch_loaded_first_is_reported_with_what_to_do():
    out = _run("import torch, helpers; from helpers.compute.threads import describe; print(describe(helpers.THREADS_IN_EFFECT))")
    assert "torch was imported before helpers" in out and "restart the kernel" in out
