"""Threads that share two cores without stalling each other.

OpenMP's default wait policy keeps idle worker threads spinning for a while after each parallel region. One torch
process on two cores loses nothing by it; two (a notebook kernel and an environment server, a second kernel, a
benchmark) each spin on the cores the other needs: a batch-16 generation fell to 4.6 tokens/s beside a training
run (measured). `OMP_WAIT_POLICY=PASSIVE` makes idle threads sleep. OpenMP reads it once, when torch loads, so
`helpers/__init__.py` sets it (unless already set) before any helper imports torch, and every process started
from a notebook (papermill kernels, local servers) inherits it.
"""

from __future__ import annotations

import os
import sys

POLICY = "PASSIVE"


def set_polite_threads() -> bool:
    """Set OMP_WAIT_POLICY=PASSIVE unless the user chose a policy. Returns False when torch was already loaded
    without it (then it cannot take effect in this process)."""
    loaded = "torch" in sys.modules
    chosen = "OMP_WAIT_POLICY" in os.environ
    os.environ.setdefault("OMP_WAIT_POLICY", POLICY)
    return chosen or not loaded


def describe(in_effect: bool) -> str:
    """One line for a notebook's first output: what the threads do, or what to do when it came too late."""
    import torch

    policy = os.environ.get("OMP_WAIT_POLICY")
    if not in_effect:
        return (f"threads: torch was imported before helpers, so OMP_WAIT_POLICY={policy} cannot take effect here; "
                "restart the kernel and import helpers first (a second torch process on these cores would stall both)")
    return (f"threads: torch uses {torch.get_num_threads()} of {os.cpu_count()} cores; OMP_WAIT_POLICY={policy} "
            f"({'idle threads sleep, so a second kernel or a server on these cores does not stall this one' if policy.upper() == POLICY else 'your choice'})")
