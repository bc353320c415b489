"""helpers: what the notebooks' lessons are not about, grouped by what it serves (map: docs/guide.md#where-things-live).

Importing it first sets OpenMP's wait policy to PASSIVE unless one is set (helpers/compute/threads.py): torch reads it
when it loads, and two torch processes on two cores otherwise stall each other.

Importing it silences exactly one library notice: TRL 1.16 reads transformers' deprecated
`is_gradient_checkpointing` while it generates, so every training cell printed a red FutureWarning a learner
can do nothing about. Nothing else is filtered.
"""

import warnings

from helpers.compute.threads import set_polite_threads

THREADS_IN_EFFECT = set_polite_threads()   # before anything below or in a notebook imports torch

warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*is deprecated", category=FutureWarning)
