"""What the GPU at hand can train, and whether a run fits, decided before a model is loaded.

    gpu = detect_gpu()                                  # None without CUDA
    card_class(gpu.memory_gib)                          # "16gb" | "24gb" | "40gb"
    estimate = estimate_memory(model_shape(name), train_tokens=4 * 600, lora=True, precision="fp16",
                               device="cuda")
    print(estimate)                                     # GiB per part: weights, optimizer, activations, ...
    check_fits(estimate, gpu.memory_gib, hint="set LORA=True or a smaller MODEL")   # raises if not

Card classes (the gpu profile follows them unless MODEL/LORA are set: helpers.recipes.CARD_RECIPES):
    16gb   T4, V100-16GB, RTX 4080...  Qwen3-0.6B with LoRA (fp16 autocast on a T4, which has no native bf16)
    24gb   L4, A10G, RTX 3090/4090     Qwen3-1.7B with LoRA
    40gb   A100, H100, H200            the original tutorials' recipes (Qwen3-1.7B, every weight trained)

The memory model is deliberately simple and errs high: fp32 master weights (16-bit frozen base weights
under LoRA on CUDA), fp32 gradients and two AdamW moments for what trains, activations of every layer
(one layer's with activation checkpointing), three fp32 copies of the logits over the vocabulary (logits,
log-probabilities, their gradient: with Qwen3's 151k tokens this is often the largest part), the KV cache of
generation, vLLM's share when colocated, and a fixed runtime overhead. tests/test_hardware.py checks it
against the peak memory of real training steps on CPU.
"""

from __future__ import annotations

import math
import os
import platform
import sys
from dataclasses import dataclass, field

from helpers.model_folders import resolve_model
from helpers.recipes import RECIPES

GIB = 2**30
OVERHEAD_GIB = 0.5   # CUDA context / CPU runtime buffers, allocator slack


@dataclass
class GPU:
    name: str
    memory_gib: float
    capability: tuple[int, int]


def apple_silicon() -> bool:
    """True on an arm64 Mac (M1, M2, ...). The notebooks train there on the CPU: `load_policy` puts the model on
    CUDA or the CPU, never on Apple's MPS, and the trainers get `use_cpu=True` (helpers.reporting.tracking), so
    nothing runs on a device this project has not measured. docs/workshop.md#macos-and-apple-silicon lists the rest."""
    return sys.platform == "darwin" and platform.machine() == "arm64"


# oneDNN ISA caps (ONEDNN_MAX_CPU_ISA) that still reach a native bf16 instruction; any other cap rules bf16 out.
_BF16_ISAS = ("AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX", "AVX10", "ALL", "DEFAULT")


def cpu_native_bf16() -> tuple[bool | None, str]:
    """(whether this CPU multiplies bf16 natively, why), read from the CPU's flags without timing anything.

    False on an x86 Linux CPU without `avx512_bf16` or `amx_bf16` (AVX2 laptops, most Colab CPU runtimes), or with
    oneDNN capped below them (ONEDNN_MAX_CPU_ISA=AVX2, as used to rehearse such a CPU): there oneDNN emulates bf16,
    15-24x slower than fp32 (docs/measurements.md), so timing it only costs the learner a minute. None where the
    flags are not readable (a Mac, another OS): the caller times both."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    if cap and not cap.startswith(_BF16_ISAS):
        return False, f"ONEDNN_MAX_CPU_ISA={cap} caps oneDNN below bf16 instructions"
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return None, "CPU flags not read on this platform"
    try:
        flags = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo")
                      if line.startswith("flags")), None)
    except OSError:
        flags = None
    if flags is None:
        return None, "no CPU flags in /proc/cpuinfo"
    found = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    if found:
        return True, f"the CPU has {' and '.join(found)}"
    return False, "the CPU has neither avx512_bf16 nor amx_bf16"


def cuda_precision(capability: tuple[int, int]) -> str:
    """The fastest precision a CUDA card runs natively, from its compute capability."""
    if capability >= (8, 0):
        return "bf16"
    if capability >= (7, 0):
        return "fp16"
    return "fp32"


FAKE_GPU_VARIABLE = "AGENT_RL_FAKE_GPU"


def detect_gpu() -> GPU | None:
    """The first CUDA device, or None.

    Test hook: AGENT_RL_FAKE_GPU=T4 (or L4, A100) reports that card from `CARDS` instead, with no CUDA behind it,
    so CI runs the gpu profile's card recipe (LoRA on a 16/24 GB card, the memory check) on a CPU machine.
    Nothing else is faked: the model still loads and trains on the CPU. On a CUDA machine the precision and the
    LoRA base's dtype follow the faked card too, so a large card rehearses a T4's recipe (benchmarks/device/run.sh).
    """
    fake = os.environ.get(FAKE_GPU_VARIABLE)
    if fake:
        return fake_gpu(fake)
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return GPU(props.name, props.total_memory / GIB, torch.cuda.get_device_capability(0))


def fake_gpu(label: str) -> GPU:
    """The card of `CARDS` whose label starts with `label` ("T4", "L4", "A100"), named as faked."""
    cards = {name.split()[0]: gpu for name, gpu in CARDS.items()}
    if label not in cards:
        raise ValueError(f"{FAKE_GPU_VARIABLE}={label!r}: use one of {', '.join(cards)} (or unset it).")
    card = cards[label]
    return GPU(f"{card.name} (faked by {FAKE_GPU_VARIABLE}, no CUDA)", card.memory_gib, card.capability)


CARD_CLASSES = (("16gb", 20.0), ("24gb", 35.0), ("40gb", math.inf))   # class, below this many GiB
def card_class(memory_gib: float) -> str:
    return next(name for name, below in CARD_CLASSES if memory_gib < below)


@dataclass
class ModelShape:
    """What the memory estimate needs to know about a model, without loading its weights."""

    params: int
    hidden: int
    layers: int
    intermediate: int
    vocab: int
    kv_dim: int   # key/value width per layer (heads x head size), for the KV cache


# Hub models the notebooks name, so the estimate works before (and without) a download.
KNOWN_SHAPES = {
    "Qwen/Qwen3-0.6B": ModelShape(596_049_920, 1024, 28, 3072, 151_936, 8 * 128),
    "Qwen/Qwen3-1.7B": ModelShape(1_720_574_976, 2048, 28, 6144, 151_936, 8 * 128),
    "Qwen/Qwen3-4B": ModelShape(4_022_468_096, 2560, 36, 9728, 151_936, 8 * 128),
    "Qwen/Qwen2.5-0.5B-Instruct": ModelShape(494_032_768, 896, 24, 4864, 151_936, 2 * 64),
}


def model_shape(name_or_path: str) -> ModelShape:
    """The shape of a known Hub model, or of a local folder (its config, counted on the meta device)."""
    if name_or_path in KNOWN_SHAPES:
        return KNOWN_SHAPES[name_or_path]
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(resolve_model(name_or_path))
    with torch.device("meta"):
        params = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    return ModelShape(params, config.hidden_size, config.num_hidden_layers, config.intermediate_size,
                      config.vocab_size, kv_heads * head_dim)


def lora_parameters(shape: ModelShape, rank: int = 16) -> int:
    """Parameters LoRA adds on every linear layer of the decoder (q, k, v, o, gate, up, down)."""
    h, i, kv = shape.hidden, shape.intermediate, shape.kv_dim
    per_layer = rank * ((h + h) * 2 + (h + kv) * 2 + (h + i) * 2 + (i + h))
    return per_layer * shape.layers


@dataclass
class MemoryEstimate:
    parts: dict[str, float] = field(default_factory=dict)   # GiB by part

    @property
    def total(self) -> float:
        return sum(self.parts.values())

    def __str__(self) -> str:
        rows = [f"  {name:<22} {gib:6.2f} GiB" for name, gib in self.parts.items() if gib >= 0.005]
        total = f"  {'total':<22} {self.total:6.2f} GiB"
        return "memory estimate (peak of a training step):\n" + "\n".join(rows + [total])


def estimate_memory(shape: ModelShape, *, train_tokens: int, generate_tokens: int = 0, logit_tokens: int | None = None,
                    lora: bool | str = False,
                    lora_rank: int = 16, precision: str = "fp32", device: str = "cpu",
                    activation_checkpointing: bool = False, vllm_gib: float = 0.0) -> MemoryEstimate:
    """Peak memory of one training step, by part.

    `train_tokens`: tokens in one micro-batch (sequences x their length); `logit_tokens`: those the loss needs
    logits for (default all; GRPO keeps only the completions'); `generate_tokens`: tokens the generation batch
    holds at once (rollouts x (prompt + completion)), for the KV cache; `lora`: False,
    True or "qlora" (4-bit base); `precision`: the autocast one ("fp32" = none).
    """
    act_bytes = 4 if precision == "fp32" else 2
    if lora == "qlora":
        weight_bytes = 0.56          # 4-bit NF4 plus its scales
    elif lora and device == "cuda":
        weight_bytes = 2             # a frozen base needs no fp32 master copy
    else:
        weight_bytes = 4
    trainable = lora_parameters(shape, lora_rank) if lora else shape.params
    per_token_layer = (10 * shape.hidden + 4 * shape.intermediate) * act_bytes * (1.6 if lora else 1.0)
    if activation_checkpointing:     # each layer's input, plus one layer recomputed at a time
        activations = train_tokens * (shape.layers * 2 * shape.hidden * act_bytes + per_token_layer)
    else:
        activations = train_tokens * shape.layers * per_token_layer
    parts = {
        "weights": shape.params * weight_bytes + (trainable * 4 if lora else 0),
        "gradients": trainable * 4,
        "optimizer (AdamW)": trainable * 8,
        "activations": activations,
        "logits (vocabulary)": (train_tokens if logit_tokens is None else logit_tokens) * shape.vocab * 4 * 3,
        "KV cache (generate)": generate_tokens * shape.layers * 2 * shape.kv_dim * act_bytes,
        # LoRA on a card generates with its adapters merged, keeping the adapted base weights to put back
        # (helpers.compute.generation.adapters_merged): every linear layer's, the embedding's aside
        "base copy (generate)": (shape.params - shape.vocab * shape.hidden) * weight_bytes
        if lora is True and device == "cuda" and generate_tokens else 0,
    }
    estimate = MemoryEstimate({k: v / GIB for k, v in parts.items()})
    estimate.parts["vLLM (colocated)"] = vllm_gib
    estimate.parts["runtime overhead"] = OVERHEAD_GIB
    return estimate


class WillNotFitError(MemoryError):
    """A run whose estimate exceeds the device's memory; the message says what to set."""


def fit_verdict(estimate: MemoryEstimate, available_gib: float) -> str:
    """"yes", "tight" (within the last tenth: it may still fit, the estimate errs high by up to ~1.4x) or "NO"."""
    if estimate.total > available_gib:
        return "NO"
    return "tight" if estimate.total > 0.9 * available_gib else "yes"


def check_fits(estimate: MemoryEstimate, available_gib: float, *, hint: str) -> bool:
    """Raise before loading anything when the estimate exceeds `available_gib`; warn (and return False) on a
    tight fit (`fit_verdict`)."""
    largest = max(estimate.parts, key=estimate.parts.get)
    verdict = fit_verdict(estimate, available_gib)
    if verdict == "NO":
        raise WillNotFitError(
            f"This run needs about {estimate.total:.1f} GiB but the device has {available_gib:.1f} GiB; the largest "
            f"part is {largest} ({estimate.parts[largest]:.1f} GiB). {hint}")
    if verdict == "tight":
        print(f"WARNING: tight fit, about {estimate.total:.1f} of {available_gib:.1f} GiB (largest: {largest}). "
              f"If it runs out of memory: {hint}")
        return False
    return True


def plan_memory(notebook: str, settings, gpu: GPU | None, *, seq_len: int | None = None,
                model: str | None = None) -> MemoryEstimate:
    """The estimate for `notebook` with `settings` on `gpu` (None: this CPU, in fp32), for `model` (a name or a
    folder; None: the profile's `settings.model`)."""
    train_tokens, generate_tokens, logit_tokens = RECIPES[notebook].step_tokens(settings, seq_len)
    vllm = settings.get("vllm_gpu_memory_utilization", 0.0) if settings.get("use_vllm") and \
        settings.get("vllm_mode", "colocate") == "colocate" else 0.0
    return estimate_memory(
        model_shape(model or settings.model), train_tokens=train_tokens, generate_tokens=generate_tokens,
        logit_tokens=logit_tokens,
        lora=settings.get("lora", False), precision=cuda_precision(gpu.capability) if gpu else "fp32",
        device="cuda" if gpu else "cpu", vllm_gib=vllm * gpu.memory_gib if gpu else 0.0,
        activation_checkpointing=settings.get("activation_checkpointing", bool(gpu)) if gpu else False)


def check_memory(notebook: str, settings, *, model: str | None = None, seq_len: int | None = None) -> MemoryEstimate:
    """Print the estimate for this run here (GPU memory on CUDA, RAM on CPU) and stop early if it will not fit.
    `model`: the folder the notebook is about to load (a warm start's checkpoint), so the estimate is of that.

    Called before the model is loaded, so a run that cannot fit fails in seconds with what to set, not after a
    download and an out-of-memory error halfway through the first step. `seq_len`: the notebook's measured
    sequence length where it has one (notebook 02's max_length).
    """
    gpu = detect_gpu()
    if gpu:
        available = gpu.memory_gib
        where = f"{gpu.name} ({gpu.memory_gib:.0f} GiB, card class {card_class(gpu.memory_gib)})"
    else:
        import psutil

        available = psutil.virtual_memory().total / GIB
        where = f"CPU ({available:.0f} GiB RAM)"
    estimate = plan_memory(notebook, settings, gpu, seq_len=seq_len, model=model)
    lora = settings.get("lora", False)
    start = f" (from {model})" if model and model != resolve_model(settings.model) else ""
    print(f"{settings.model}{start}{' + LoRA' if lora is True else ' + QLoRA' if lora == 'qlora' else ''} on {where}")
    print(estimate)
    smaller = "LORA=True" if not lora else "LORA='qlora'" if gpu and lora is True else "a smaller MODEL"
    check_fits(estimate, available, hint=f"Set {smaller}, or lower the batch size or completion length "
                                         f"(or turn activation checkpointing on).")
    return estimate


CARDS = {"T4 16 GB": GPU("Tesla T4", 14.7, (7, 5)), "L4 24 GB": GPU("NVIDIA L4", 22.0, (8, 9)),
         "A100 40 GB": GPU("NVIDIA A100-SXM4-40GB", 39.4, (8, 0))}
