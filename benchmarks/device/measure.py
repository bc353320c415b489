"""Run an exported notebook script in this process and record its wall time, peak GPU memory and metrics.json.

    AGENT_RL_RUNS=/tmp/runs/nb01 OUT=/some/dir python3 measure.py nb01 .gpu/01_grpo_walkthrough.py --profile gpu ...

Writes $OUT/<name>.json every 10 s while the script runs and once at the end, so a run that a timeout kills
still reports its peak so far (an interrupted notebook catches the first SIGINT and goes on to evaluate).
TRAIN_TO_MIN_STEPS=1 makes notebook 01's time budget train on to MIN_STEPS however far past its cap: with
TRAIN_MINUTES=0.01 that is "the first N steps of the planned schedule", as a CPU's budget stops it.
CAP_GIB=14.7 lets PyTorch's allocator use no more than that on this card (a T4's memory on an H200): a recipe that
would not fit the smaller card fails here with CUDA out-of-memory, as it would there.
"""
import json
import os
import runpy
import sys
import threading
import time
import traceback
from pathlib import Path

import torch

name, script, *args = sys.argv[1:]
sys.argv = [script, *args]
if os.environ.get("CAP_GIB") and torch.cuda.is_available():
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(float(os.environ["CAP_GIB"]) * 2**30 / total)
if os.environ.get("TRAIN_TO_MIN_STEPS"):   # TRAIN_MINUTES=0.01 MIN_STEPS=N then trains exactly N steps of the plan
    import helpers.compute.budget                   # (otherwise a cap that small is far too short and stops at step 3)
    helpers.compute.budget.MAX_EXTENSION = float("inf")
if os.environ.get("EVAL_BATCH"):   # rows per evaluation batch on the card (helpers.chain_sum.evaluation says 8 there)
    import helpers.chain_sum.evaluation
    helpers.chain_sum.evaluation.default_batch_size = lambda model, *sizes: int(os.environ["EVAL_BATCH"])
started = time.time()
result = {"name": name, "args": args, "rc": None, "error": None, "torch": torch.__version__,
          "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
          "cap_gib": os.environ.get("CAP_GIB"), "fake_gpu": os.environ.get("AGENT_RL_FAKE_GPU")}


def record(final: bool = False) -> None:
    result["wall_s"] = round(time.time() - started, 1)
    result["finished"] = final
    if torch.cuda.is_available():
        result["peak_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        result["peak_reserved_gib"] = round(torch.cuda.max_memory_reserved() / 2**30, 2)
    for metrics in Path(os.environ["AGENT_RL_RUNS"]).glob("*/metrics.json"):
        result.setdefault("metrics", {})[metrics.parent.name] = json.loads(metrics.read_text())
    Path(os.environ["OUT"], f"{name}.json").write_text(json.dumps(result, indent=1, default=str))


def every_ten_seconds() -> None:
    while True:
        time.sleep(10)
        record()


threading.Thread(target=every_ten_seconds, daemon=True).start()
try:
    runpy.run_path(script, run_name="__main__")
    result["rc"] = 0
except SystemExit as exit_:
    result["rc"] = exit_.code if isinstance(exit_.code, int) else 1
except BaseException as error:
    result["rc"], result["error"] = 1, "".join(traceback.format_exception(error))[-3000:]
    traceback.print_exc()
record(final=True)
print(f"[measure] {name}: rc {result['rc']}, {result['wall_s']} s, peak {result.get('peak_allocated_gib')} GiB "
      f"allocated, {result.get('peak_reserved_gib')} GiB reserved", flush=True)
