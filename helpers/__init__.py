"""helpers: what the notebooks' lessons are not about, grouped by what it serves (map: docs/guide.md#where-things-live).

Importing it first runs helpers/startup.py: OpenMP's wait policy PASSIVE unless one is set (before anything imports
torch), one TRL notice silenced, jsonschema's unused IRI parser skipped (seconds of every process that imports
openenv), and under `accelerate launch` the output of every process but the main one to a file, and each process's
torch.distributed group ended at a clean exit.

Layers, bottom first. A module imports only from its own layer or a lower one, never in a circle, and never inside
a function to get around one (tests/test_layers.py checks it; its LAYERS is this list as a table):

1. base, what everything uses: startup, secrets, prompts, recipes (data), progress (printed progress lines),
   runs (a notebook's run folder and its metrics.json), model_folders (model names -> folders, building the
   offline models once)
2. compute/: hardware, threads, precision, generation, loss_forward, budget, vllm_check, fast_trainers, processes
   (several processes under `accelerate launch`)
3. models/ (the policy a notebook trains), servers/ (local and hosted servers), profiles.py (a notebook's settings)
4. reporting/ (records, plots, alarms, publishing), rollouts/ (custom rollout_funcs and their checks)
5. the lesson support per notebook: chain_sum/ (01, 02), wordle/ (03), openreward/ (04)

Maintainer command lines live in tools/, not here.
"""

# first: before anything below or in a notebook imports torch
from helpers.startup import THREADS_IN_EFFECT  # noqa: F401

