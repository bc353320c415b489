"""What importing helpers does first, before any helper (or a notebook) imports torch.

It sets OpenMP's wait policy to PASSIVE unless one is set (helpers/compute/threads.py says why): torch reads it when
it loads, and two torch processes on two cores otherwise stall each other. `THREADS_IN_EFFECT` is False when torch was
imported before helpers (then the policy cannot take effect in this process).

It silences exactly one library notice: TRL 1.16 reads transformers' deprecated `is_gradient_checkpointing` while
it generates, so every training cell printed a red FutureWarning a learner can do nothing about. Nothing else is
filtered.

It skips one import nothing here uses: openenv.core imports mcp, mcp imports jsonschema, and jsonschema builds a
grammar parser at import time for its optional IRI format check whenever rfc3987_syntax is installed (jupyter brings
it). That parser was 1.3-3.6 s of every process that imports openenv (a notebook kernel, each environment server):
docs/measurements.md, "Start-up imports". `del sys.modules["rfc3987_syntax"]` brings the check back.

Under `accelerate launch` with several processes, every process but the main one writes what it prints to a log file
of its own (its path goes to stderr once), so a run's output reads once; errors still reach the screen. And each
process ends its torch.distributed group itself when the script ends cleanly (end_group_at_exit says why).
"""

from __future__ import annotations

import atexit
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


def skip_unused_iri_parser() -> bool:
    """Mark rfc3987_syntax as absent, so jsonschema (under openenv's mcp) does not build its IRI parser on import.
    Returns False when jsonschema's format checks were already loaded (then the parser is built already)."""
    if "jsonschema._format" in sys.modules:
        return False
    sys.modules.setdefault("rfc3987_syntax", None)
    return True


skip_unused_iri_parser()



def several_processes() -> bool:
    """Started by `accelerate launch` (torchrun) with more than one process. (helpers.compute.processes says the
    same for the other helpers; this base layer runs before anything imports it.)"""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def quiet_other_processes() -> str | None:
    """Send this process's printed output to a file when it is not the main one of several (`accelerate launch`).
    Returns the file's path, or None where nothing changed."""
    if not several_processes() or int(os.environ.get("RANK", "0")) == 0:
        return None
    import tempfile

    # the launcher (torchrun's agent) is every process's parent: one name per launch
    path = os.path.join(tempfile.gettempdir(), f"agent-rl-launch{os.getppid()}-process{os.environ['RANK']}.log")
    sys.stdout = open(path, "a", buffering=1)   # noqa: SIM115 (open for the process's lifetime)
    print(f"process {os.environ['RANK']} of {os.environ['WORLD_SIZE']}: its printed output goes to {path}",
          file=sys.stderr)
    return path


QUIET_OUTPUT = quiet_other_processes()


def end_group_at_exit() -> bool:
    """Under `accelerate launch`: destroy torch.distributed's process group when the script ends without an error.
    A gloo group left to the interpreter's teardown aborts the process ("terminate called without an active
    exception", pytorch/pytorch#190489; how often, measured: docs/scale-out.md section 7).
    Not after an uncaught error: the launcher stops the others then, and a shutdown that waits for them could hang.
    Registered first, so it runs after every other exit handler (servers stop before it). Returns True if registered."""
    if not several_processes():
        return False
    failed = []
    report = sys.excepthook

    def noting(*error):
        failed.append(error[0])
        report(*error)

    def end():
        dist = sys.modules.get("torch.distributed")
        if not failed and dist is not None and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()

    sys.excepthook = noting
    atexit.register(end)
    return True


END_GROUP_AT_EXIT = end_group_at_exit()

warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*is deprecated", category=FutureWarning)
