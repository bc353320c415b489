"""What importing helpers does first, before any helper (or a notebook) imports torch.

It sets OpenMP's wait policy to PASSIVE unless one is set (helpers/compute/threads.py says why): torch reads it when
it loads, and two torch processes on two cores otherwise stall each other. `THREADS_IN_EFFECT` is False when torch was
imported before helpers (then the policy cannot take effect in this process).

It silences exactly one library notice: TRL 1.16 reads transformers' deprecated `is_gradient_checkpointing` while
it generates, so every training cell printed a red FutureWarning a learner can do nothing about. Nothing else is
filtered.
"""

from __future__ import annotations

import os
import sys
import warnings

POLICY = "PASSIVE"


def set_polite_threads() -> bool:
    """Set OMP_WAIT_POLICY=PASSIVE unless the user chose a policy. Returns False when torch was already loaded
    without it (then it cannot take effect in this process)."""
    loaded = "torch" in sys.modules
    chosen = "OMP_WAIT_POLICY" in os.environ
    os.environ.setdefault("OMP_WAIT_POLICY", POLICY)
    return chosen or not loaded


THREADS_IN_EFFECT = set_polite_threads()

warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*is deprecated", category=FutureWarning)
