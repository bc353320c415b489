"""Which precision to train and evaluate in, chosen for the machine at hand.

    choice = choose_precision(model, settings.bf16)      # "auto", "bf16", "fp16", "fp32" (True/False too)
    print(choice)                                         # what was chosen and why, with the timings
    SFTConfig(..., bf16=choice.bf16, fp16=choice.fp16)    # the trainer's mixed precision
    evaluate_policy(..., precision=choice.precision)      # before and after in the same precision

Weights stay fp32 in every case: mixed precision keeps fp32 master weights and runs the matrix
products in 16 bits (autocast). bf16 *weights* would round most small updates away: one AdamW step at
lr 1e-6 changes only a few percent of them.

"auto" decides by what the hardware really does, not by a capability flag:
- CUDA: bf16 on compute capability 8.0+ (A100, L4, H100...); fp16 on 7.x (T4, V100), which have fp16
  tensor cores but only emulate bf16 (`torch.cuda.is_bf16_supported()` says True on a T4 anyway);
  fp32 below.
- CPU: time a few forward+backward passes of the actual model in fp32 and under bf16 autocast and keep
  the faster. oneDNN reports bf16 "supported" on any AVX-512 CPU and emulates it where the CPU has no
  AVX512-BF16/AMX: there a bf16 step measured 2.5x slower than fp32.
- An arm64 Mac (Apple Silicon): the model trains on the CPU (helpers never moves it to MPS), timed as above; the
  reason says so, since neither the speed nor the learning of bf16 on an Apple CPU is measured here.
- Apple's MPS (a model a user moved there): MPS is not CUDA, and nothing here measured autocast on it, so
  "auto" keeps fp32 and says why; fp16 (a CUDA choice) is refused there as on a CPU.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from dataclasses import dataclass, field

from helpers.compute import hardware
from helpers.compute.hardware import cuda_precision

PRECISIONS = ("fp32", "bf16", "fp16")


class PrecisionError(ValueError):
    """A precision the setting or the hardware cannot give; the message says what to set."""


@dataclass
class PrecisionChoice:
    """The precision a run uses, where and why. `seconds_per_pass` holds what was measured (CPU "auto")."""

    precision: str
    device: str
    reason: str
    seconds_per_pass: dict[str, float] = field(default_factory=dict)

    @property
    def bf16(self) -> bool:
        return self.precision == "bf16"

    @property
    def fp16(self) -> bool:
        return self.precision == "fp16"

    def as_metrics(self) -> dict:
        """What metrics.json records about it."""
        return {"precision": self.precision, "precision_device": self.device, "precision_reason": self.reason,
                "precision_seconds_per_pass": dict(self.seconds_per_pass)}

    def __str__(self) -> str:
        name = "fp32" if self.precision == "fp32" else f"{self.precision} autocast over fp32 weights"
        return f"precision: {name} on {self.device.upper()} ({self.reason})"


def card_capability() -> tuple[int, int]:
    """The CUDA card's compute capability, or that of the card AGENT_RL_FAKE_GPU names (a large card rehearsing a T4)."""
    import torch

    card = hardware.detect_gpu()   # read at call time: tests and AGENT_RL_FAKE_GPU swap it
    return card.capability if card else torch.cuda.get_device_capability()


def _normalise(setting) -> str:
    named = {True: "bf16", False: "fp32", None: "auto"}
    if isinstance(setting, bool) or setting is None:
        return named[setting]
    if setting in PRECISIONS or setting == "auto":
        return setting
    raise PrecisionError(f"Unknown precision {setting!r}: use 'auto', 'fp32', 'bf16' or 'fp16' "
                         "(True means bf16, False means fp32).")


def choose_precision(model, setting="auto", *, batch_size: int = 2, seq_len: int = 128,
                     repeats: int = 2, measure=None, native_bf16: bool | None = None) -> PrecisionChoice:
    """The precision to train `model` in: `setting` as given, or "auto" (see the module docstring).

    On CPU "auto" costs a few seconds: one warm-up and `repeats` timed forward+backward passes of a
    `batch_size` x `seq_len` batch in each precision; the faster is kept (the model is left as it was).
    A CPU whose flags rule bf16 out (`hardware.cpu_native_bf16`) gets fp32 without the timing: the emulated bf16
    passes alone took a minute on an AVX2 laptop-class CPU. `native_bf16` overrides that reading (None: read it,
    unless `measure` is given). `measure(model, precision) -> seconds` replaces the timing (tests use it to force
    a slow path).
    """
    wanted = _normalise(setting)
    device = next(model.parameters()).device.type   # where the model trains: load it there first
    if device == "cuda":
        capability = card_capability()
        native = cuda_precision(capability)
        if wanted == "auto":
            return PrecisionChoice(native, device, f"compute capability {capability[0]}.{capability[1]}: "
                                   f"{native} is what this card computes natively")
        if wanted == "bf16" and native != "bf16":
            print(f"WARNING: bf16 was asked for on a card of compute capability {capability[0]}.{capability[1]}, "
                  f"which only emulates it (slow); {native} is native there (set PRECISION='{native}').")
        return PrecisionChoice(wanted, device, "as set")
    if wanted == "fp16":
        raise PrecisionError(f"fp16 autocast is for CUDA cards (T4, V100); on {device.upper()} use 'auto', 'bf16' "
                             "or 'fp32'.")
    if wanted != "auto":
        return PrecisionChoice(wanted, device, "as set")
    if device == "mps":
        return PrecisionChoice("fp32", device, "Apple MPS is not CUDA and autocast on it is not measured in this "
                               "project: fp32 (the notebooks train on the CPU of a Mac; this model was moved to MPS)")
    if native_bf16 is None and measure is None:
        native_bf16, why = hardware.cpu_native_bf16()
    else:
        why = "as told"
    if native_bf16 is False:
        return PrecisionChoice("fp32", device, f"{why}: bf16 would be emulated, many times slower than fp32, so it "
                               "was not timed")
    measure = measure or (lambda m, p: time_training_pass(m, p, batch_size=batch_size, seq_len=seq_len,
                                                          repeats=repeats))
    timings = {p: measure(model, p) for p in ("fp32", "bf16")}
    best = min(timings, key=timings.get)
    other = "bf16" if best == "fp32" else "fp32"
    where = ("Apple Silicon CPU, timed like any CPU (its learning in either precision is not measured here): "
             if hardware.apple_silicon() else "")
    return PrecisionChoice(best, device, f"{where}measured: {timings[best]:.2f} s per training pass against "
                           f"{timings[other]:.2f} s in {other}", {p: round(t, 3) for p, t in timings.items()})


def time_training_pass(model, precision: str, *, batch_size: int = 2, seq_len: int = 128, repeats: int = 2) -> float:
    """Best of `repeats` forward+backward passes of `model` on random tokens, in seconds (after a warm-up).

    Gradients are cleared afterwards and no optimizer runs: the model's weights and mode are unchanged,
    and the global random state is not touched.
    """
    import torch

    device = next(model.parameters()).device
    vocab = model.get_input_embeddings().num_embeddings
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch_size, seq_len), generator=generator).to(device)
    was_training = model.training
    model.train()
    best = float("inf")
    try:
        for i in range(repeats + 1):
            started = time.perf_counter()
            with autocast(precision, device.type):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            if i:  # the first pass warms up oneDNN's kernels
                best = min(best, time.perf_counter() - started)
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return best


def autocast(precision: str | None, device_type: str = "cpu"):
    """The autocast context for `precision` on `device_type`; fp32 or None leave the caller's setting."""
    import torch

    if precision in (None, "fp32"):
        return contextlib.nullcontext()
    if precision not in PRECISIONS:
        raise PrecisionError(f"Unknown precision {precision!r}: use one of {PRECISIONS}.")
    return torch.autocast(device_type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)


_CASTING_MODELS = weakref.WeakSet()   # models inside `weight_casts_reused` now (a nested entry adds nothing)


# Where weight_casts_reused lends its copies. A card is left out: there the copies would take memory the plan does
# not count (benchmarks/device/generation.py adds "cuda" to time it: no faster on an H100, docs/gpu.md).
CAST_DEVICES = {"cpu"}


@contextlib.contextmanager
def weight_casts_reused(model):
    """Inside, each fp32 linear weight is cast to autocast's type once, not once per product, in no-gradient
    passes under autocast on a device in `CAST_DEVICES` (the CPU's bf16). `generate_shared` enters it, so every
    rollout, evaluation and preflight batch gets it; on leaving, the hooks and the copies go.

    Why: autocast casts a linear layer's fp32 weight to bf16 at every product, and keeps a cast only for weights
    that need gradients and only until the outermost autocast region ends; accelerate enters one region per
    `forward` call, so every decode step casts every weight again, the frozen layers' included (~42 of ~119 ms a
    16-row SmolLM2 decode step, benchmarks/rollouts.py). The copy is what autocast would have made, so outputs are
    bit-identical (tests/test_precision.py). Passes that build a graph (the loss) are untouched."""
    import torch
    from torch import nn

    if model in _CASTING_MODELS:
        yield model
        return
    copies: dict = {}   # module -> (the versions its copies were cast at, {name: 16-bit copy})

    def lend(module, args):
        weight = module._parameters.get("weight")
        if (torch.is_grad_enabled() or weight is None or weight.dtype != torch.float32
                or weight.device.type not in CAST_DEVICES or not torch.is_autocast_enabled(weight.device.type)):
            return
        dtype = torch.get_autocast_dtype(weight.device.type)
        own = {name: t for name, t in module._parameters.items() if t is not None}
        key = tuple((t._version, t.data_ptr()) for t in own.values())
        held = copies.get(module)
        if held is None or held[0] != key:
            held = (key, {name: nn.Parameter(t.detach().to(dtype), requires_grad=False)
                          for name, t in own.items()})
            copies[module] = held
        module.__dict__["_lent_from"] = own
        module._parameters.update(held[1])

    def give_back(module, args, output):
        own = module.__dict__.pop("_lent_from", None)
        if own is not None:
            module._parameters.update(own)

    hooks = []
    for module in model.modules():
        if type(module) is nn.Linear:
            hooks.append(module.register_forward_pre_hook(lend))
            hooks.append(module.register_forward_hook(give_back, always_call=True))
    _CASTING_MODELS.add(model)
    try:
        yield model
    finally:
        for hook in hooks:
            hook.remove()
        copies.clear()
        _CASTING_MODELS.discard(model)
