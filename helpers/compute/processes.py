"""Several processes under `accelerate launch`: which one this is, and the work that must happen once.

`accelerate launch --multi_gpu --num_processes N script.py` starts N copies of an exported notebook (torchrun under
it), one per GPU; on a machine without one they train on the CPU over PyTorch's gloo backend. Training is shared: TRL
gives each process its slice of every step's rollouts and DDP averages the gradients, so the weights stay the same
everywhere. What must happen once (a local server, the teacher's rollouts, the preflight, the held-out evaluation,
plots, metrics, the saved model and the Hub push) runs on the main process, and the others receive its result.
With one process (a notebook, Colab, `python script.py`) every function here is a plain call.
What was run with two processes, and what was not: docs/scale-out.md.
"""

from __future__ import annotations

import hashlib
import os
import threading

_inside = threading.local()   # set while the main process runs `on_main` work: nested calls run plainly
# what this process ran for all (`ran`) and what it was handed (`received`), by function name, in order: under
# accelerate launch the run record keeps both per process, so a run shows that the once-only work ran once
ONCE = {"ran": [], "received": []}


def process_index() -> int:
    """This process's rank (0 = the main process); 0 outside `accelerate launch`."""
    return int(os.environ.get("RANK", "0"))


def process_count() -> int:
    """How many processes train together (WORLD_SIZE, set by the launcher); 1 outside `accelerate launch`."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    return process_index() == 0


def _group():
    """torch.distributed, initialized the way the trainer will find it (accelerate's shared state), CPU or GPU."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        from accelerate import PartialState

        PartialState(cpu=not torch.cuda.is_available())
    return dist


def _several() -> bool:
    return process_count() > 1 and not getattr(_inside, "active", False)


def share(value=None):
    """The main process's `value`, on every process (the others' `value` is ignored)."""
    if not _several():
        return value
    box = [value if is_main_process() else None]
    _group().broadcast_object_list(box, src=0)
    return box[0]


def on_main(fn, *args, **kwargs):
    """fn(*args, **kwargs) run by the main process only; every process returns its result. Work inside it that
    calls on_main again runs plainly. If it raises on the main process, that process stops with the error and
    the launcher stops the others."""
    if not _several():
        return fn(*args, **kwargs)
    result = None
    name = getattr(fn, "__name__", repr(fn)).lstrip("_")
    if is_main_process():
        _inside.active = True
        try:
            result = fn(*args, **kwargs)
        finally:
            _inside.active = False
        ONCE["ran"].append(name)
    else:
        ONCE["received"].append(name)
    return share(result)


def one_server(start, *args, **kwargs):
    """`start(...)` returns (address, server); run once, on the main process, for every process. The others get
    (address, None): one server, used by all, stopped by the process that started it."""
    if not _several():
        return start(*args, **kwargs)
    kept = {}   # the server handle stays in this process; only the address is handed over

    def started():
        address, kept["server"] = start(*args, **kwargs)
        return address

    started.__name__ = getattr(start, "__name__", repr(start))
    return on_main(started), kept.get("server")


def from_every_process(value) -> list:
    """[value of process 0, value of process 1, ...], on every process."""
    if not _several():
        return [value]
    gathered = [None] * process_count()
    _group().all_gather_object(gathered, value)
    return gathered


def weights_digest(model) -> str:
    """A short hash of a model's weights (every parameter's bytes, in order): equal on every process after DDP."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def trainer_record(trainer) -> dict:
    """A trainer's optimizer steps and the hash of its weights: what every process must agree on after training."""
    return {"steps": trainer.state.global_step,
            "weights": weights_digest(trainer.accelerator.unwrap_model(trainer.model))}
