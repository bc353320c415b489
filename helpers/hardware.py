"""What the GPU at hand can train, and whether a run fits, decided before a model is loaded.

    gpu = detect_gpu()                                  # None without CUDA
    gpu_recipe(gpu)                                     # model + LoRA for its card class
    estimate = estimate_memory(model_shape(name), train_tokens=4 * 600, lora=True, precision="fp16",
                               device="cuda")
    print(estimate)                                     # GiB per part: weights, optimizer, activations, ...
    check_fits(estimate, gpu.memory_gib, hint="set LORA=True or a smaller MODEL")   # raises if not

Card classes (the gpu profile follows them unless MODEL/LORA are set):
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
from dataclasses import dataclass, field

GIB = 2**30
OVERHEAD_GIB = 0.5   # CUDA context / CPU runtime buffers, allocator slack


@dataclass
class GPU:
    name: str
    memory_gib: float
    capability: tuple[int, int]


def detect_gpu() -> GPU | None:
    """The first CUDA device, or None."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return GPU(props.name, props.total_memory / GIB, torch.cuda.get_device_capability(0))


CARD_CLASSES = (("16gb", 20.0), ("24gb", 35.0), ("40gb", math.inf))   # class, below this many GiB
GPU_RECIPES = {
    "16gb": {"model": "Qwen/Qwen3-0.6B", "lora": True},
    "24gb": {"model": "Qwen/Qwen3-1.7B", "lora": True},
    "40gb": {},   # the profile as written: the original tutorials' recipes
}


def card_class(memory_gib: float) -> str:
    return next(name for name, below in CARD_CLASSES if memory_gib < below)


def gpu_recipe(gpu: GPU | None) -> dict:
    """The gpu profile's changes for this card (model, LoRA); empty on a 40 GB+ card or without a GPU."""
    return dict(GPU_RECIPES[card_class(gpu.memory_gib)]) if gpu else {}


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

    from helpers.models import resolve_model

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
        return "memory estimate (peak of a training step):\n" + "\n".join(rows) + f"\n  {'total':<22} {self.total:6.2f} GiB"


def estimate_memory(shape: ModelShape, *, train_tokens: int, generate_tokens: int = 0, lora: bool | str = False,
                    lora_rank: int = 16, precision: str = "fp32", device: str = "cpu",
                    activation_checkpointing: bool = False, vllm_gib: float = 0.0) -> MemoryEstimate:
    """Peak memory of one training step, by part.

    `train_tokens`: tokens in one micro-batch (sequences x their length); `generate_tokens`: tokens the
    generation batch holds at once (rollouts x (prompt + completion)), for the KV cache; `lora`: False,
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
        "logits (vocabulary)": train_tokens * shape.vocab * 4 * 3,
        "KV cache (generate)": generate_tokens * shape.layers * 2 * shape.kv_dim * act_bytes,
    }
    estimate = MemoryEstimate({k: v / GIB for k, v in parts.items()})
    estimate.parts["vLLM (colocated)"] = vllm_gib
    estimate.parts["runtime overhead"] = OVERHEAD_GIB
    return estimate


class WillNotFitError(MemoryError):
    """A run whose estimate exceeds the device's memory; the message says what to set."""


def check_fits(estimate: MemoryEstimate, available_gib: float, *, hint: str) -> None:
    """Raise before loading anything when the estimate exceeds `available_gib` (90 % of it is usable)."""
    usable = 0.9 * available_gib
    if estimate.total > usable:
        largest = max(estimate.parts, key=estimate.parts.get)
        raise WillNotFitError(
            f"This run needs about {estimate.total:.1f} GiB but the device has {available_gib:.1f} GiB "
            f"({usable:.1f} usable); the largest part is {largest} ({estimate.parts[largest]:.1f} GiB). {hint}")


def check_memory(model: str, *, lora: bool | str, train_tokens: int, generate_tokens: int = 0,
                 activation_checkpointing: bool = False, vllm_fraction: float = 0.0) -> MemoryEstimate:
    """Print the estimate for training `model` here (GPU memory on CUDA, RAM on CPU) and stop early if it will not fit.

    Called before the model is loaded, so a run that cannot fit fails in seconds with what to set, not after a
    download and an out-of-memory error halfway through the first step.
    """
    from helpers.precision import cuda_precision

    gpu = detect_gpu()
    if gpu:
        device, available, precision = "cuda", gpu.memory_gib, cuda_precision(gpu.capability)
        where = f"{gpu.name} ({gpu.memory_gib:.0f} GiB, card class {card_class(gpu.memory_gib)})"
    else:
        import psutil

        device, available, precision = "cpu", psutil.virtual_memory().total / GIB, "fp32"
        where = f"CPU ({available:.0f} GiB RAM)"
    estimate = estimate_memory(model_shape(model), train_tokens=train_tokens, generate_tokens=generate_tokens,
                               lora=lora, precision=precision, device=device,
                               activation_checkpointing=activation_checkpointing,
                               vllm_gib=vllm_fraction * available if gpu else 0.0)
    print(f"{model}{' + LoRA' if lora is True else ' + QLoRA' if lora == 'qlora' else ''} on {where}")
    print(estimate)
    smaller = "LORA=True" if not lora else "LORA='qlora'" if device == "cuda" and lora is True else "a smaller MODEL"
    check_fits(estimate, available, hint=f"Set {smaller}, or lower the batch size or completion length "
                                         f"(or turn activation checkpointing on).")
    return estimate
