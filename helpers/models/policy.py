"""The policy a notebook trains: where it starts, how it loads and saves, which layers learn.

    model_path, said = warm_start(NOTEBOOK, settings.model, warm=settings.warm_start)
    model = load_policy(model_path, lora=settings.lora)      # fp32 weights (or LoRA adapters), on the GPU if any
    freeze_lower_layers(model, settings.freeze_layers)
    save_policy(model, tokenizer, folder)

Model names become folders in helpers.model_folders (which builds the offline models once).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from helpers.compute.hardware import cuda_precision
from helpers.compute.precision import card_capability
from helpers.model_folders import MODEL_NAMES, ModelError, resolve_model
from helpers.recipes import RECIPES
from helpers.runs import runs_dir


def warm_start(notebook: str, model: str, *, warm: bool = True) -> tuple[str, str]:
    """Where `notebook` starts: the checkpoint of the notebook its recipe starts from (01: notebook 02's SFT) when
    `warm` and it exists, else the base `model`. Returns (path for from_pretrained, a line saying which, for the
    record). With `warm` and no checkpoint it says so, naming the notebook to run first, and starts from the base."""
    source = RECIPES[notebook].starts_from
    checkpoint = runs_dir() / source / "checkpoint" if source else None
    if warm and checkpoint and checkpoint.is_dir():
        return str(checkpoint), f"notebook {source[:2]} SFT checkpoint ({checkpoint})"
    if warm and checkpoint:
        print(missing_checkpoint_line(notebook, checkpoint))
    return resolve_model(model), f"{model} (base, no warm start)"


def missing_checkpoint_line(notebook: str, checkpoint) -> str:
    """The one line a learner reads who runs `notebook` before the notebook it starts from (01 before 02)."""
    source = RECIPES[notebook].starts_from
    # its minutes per CPU class live on the results page (helpers.reporting, a layer above this one, computes them)
    takes = f"; its minutes on your kind of CPU: docs/results.md#notebook-{source[:2]}"
    return (f"NOTE: notebook {notebook[:2]} runs before notebook {source[:2]} here: no SFT checkpoint at {checkpoint}, "
            f"so it starts from the base model, which rarely calls the tool and gives GRPO little to learn from: "
            f"run notebook {source[:2]} first (notebooks/{source}.ipynb{takes}), then restart this notebook; "
            f"or set WARM_START = False to start from the base model on purpose.")


def warm_start_record(notebook: str) -> dict:
    """What the notebook `notebook` starts from recorded about its checkpoint ({} when there is none)."""
    source = RECIPES[notebook].starts_from
    path = runs_dir() / source / "metrics.json" if source else None
    return json.loads(path.read_text()) if path and path.exists() else {}


class LoRAError(ValueError):
    """LoRA/QLoRA asked for where it cannot run; the message says what to set."""


def load_policy(name: str, *, device: str | None = None, lora: bool | str = False, lora_rank: int = 16,
                seed: int | None = None):
    """The model a notebook trains: `name` resolved (see `resolve_model`), on `device`, optionally with LoRA.

    Full fine-tuning keeps fp32 weights in every precision: the trainer's bf16/fp16 is autocast over fp32
    master weights (TRL's own default); bf16 *weights* round small updates away (one AdamW step at lr 1e-6
    changed only a few percent of them, tests/test_precision.py). `device` None: CUDA when there is one, so
    the evaluation before training runs where training will, not on the CPU of a GPU machine.

    `lora=True` trains rank-`lora_rank` adapters on every linear layer instead (peft): on CUDA the frozen base
    is kept in the card's 16-bit type, the adapters in fp32. `lora="qlora"` loads the base in 4 bits (CUDA and
    bitsandbytes only). A folder that holds a saved adapter (adapter_config.json) loads as base + adapter.

    `seed`: torch's seed before loading, so a LoRA run's adapters start the same for the same seed.

    A plain transformers (or peft) model: the speed paths are the trainer's (`helpers.compute.fast_trainers`) and the
    evaluations' (`helpers.compute.generation.generate_shared`), not the model's.
    """
    import torch
    from transformers import AutoModelForCausalLM

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if seed is not None:
        torch.manual_seed(seed)
    path = resolve_model(name)
    adapter = Path(path).is_dir() and (Path(path) / "adapter_config.json").exists()
    if lora == "qlora" and device != "cuda":
        raise LoRAError("LORA='qlora' loads the base model in 4 bits with bitsandbytes, which needs a CUDA GPU; "
                        "on CPU use LORA=True (or False).")
    kwargs = {"dtype": torch.float32}
    if (lora or adapter) and device == "cuda":
        native = cuda_precision(card_capability())   # a T4: fp16
        kwargs["dtype"] = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(native, torch.float32)
    if lora == "qlora":
        if importlib.util.find_spec("bitsandbytes") is None:
            raise LoRAError("LORA='qlora' needs bitsandbytes: pip install bitsandbytes (or use LORA=True).")
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=kwargs["dtype"])
    try:
        if adapter:
            from peft import AutoPeftModelForCausalLM

            model = AutoPeftModelForCausalLM.from_pretrained(path, is_trainable=True, **kwargs)
        else:
            model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except OSError as exc:
        raise ModelError(
            f"Could not load the model {name!r}: {str(exc).splitlines()[0]} A Hub id needs a network (and, for "
            f"gated models, `huggingface-cli login`); offline, set MODEL to one of {', '.join(MODEL_NAMES)} or a "
            f"local folder.") from exc
    align_with_tokenizer(model, path)
    if lora and not adapter:
        from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

        if lora == "qlora":
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
        model = get_peft_model(model, LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank, lora_dropout=0.0,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
    return model if lora == "qlora" else model.to(device)


def align_with_tokenizer(model, path: str) -> None:
    """Give the model's configs the special tokens of the tokenizer saved beside it, quietly, at load time.

    SFTTrainer does exactly this when it starts (transformers' `align_special_tokens`), but it announces it with a
    red warning in the training cell (SmolLM2's generation config lacks the tokenizer's BOS): nothing a learner
    has to act on. A folder without a tokenizer is left as it is."""
    from transformers import AutoTokenizer
    from transformers import logging as hf_logging
    from transformers.trainer_utils import align_special_tokens

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError):
        return
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        align_special_tokens(model, tokenizer)
    finally:
        hf_logging.set_verbosity(level)


def save_policy(model, tokenizer, folder, *, merged: bool = False) -> Path:
    """Save what was trained: the LoRA adapter (small; `load_policy(folder)` puts it back on its base), or
    with `merged=True` a plain model with the adapter folded into its weights (loads without peft)."""
    folder = Path(folder)
    if merged and hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def free_memory() -> None:
    """Return the memory of a finished trainer before the next one is built: `del trainer; free_memory()`.

    A trainer holds its model, optimizer state and generation caches; `del` drops your name for it,
    the garbage collector breaks the cycles that keep it alive, and CUDA's cache hands the memory back.
    """
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def freeze_lower_layers(model, n_layers: int) -> int:
    """Train only the top of the network: freeze the token embeddings and the first `n_layers` decoder layers.

    Backpropagation then stops at the first trainable layer, so a step skips the backward pass of the frozen
    ones: quicker steps that learn as much per step (docs/measurements.md#notebook-02). SmolLM2 ties its output
    layer to the embeddings, so that layer is frozen too. Returns the number of parameters left trainable.
    """
    if n_layers == 0 or hasattr(model, "peft_config"):   # nothing to freeze, or LoRA: the base is frozen already
        return trainable_parameters(model)
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise ValueError(f"freeze_lower_layers: {type(model).__name__} has no `model.layers`; "
                         f"set FREEZE_LAYERS=0 to train every layer.")
    if not 0 <= n_layers < len(layers):
        raise ValueError(f"FREEZE_LAYERS={n_layers}, but the model has {len(layers)} layers: "
                         f"use 0 (train everything) to {len(layers) - 1}.")
    model.get_input_embeddings().weight.requires_grad_(False)
    for layer in layers[:n_layers]:
        layer.requires_grad_(False)
    return trainable_parameters(model)


def trainable_parameters(model) -> int:
    """How many of `model`'s parameters the optimizer will update (those with requires_grad)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def describe_trainable(model, n_frozen_layers: int) -> str:
    """One line for a notebook's output: how much of `model` trains after `freeze_lower_layers`."""
    total = sum(p.numel() for p in model.parameters())
    if hasattr(model, "peft_config"):
        return (f"training {trainable_parameters(model) / 1e6:.1f} M LoRA parameters; the {total / 1e6:.1f} M "
                f"of the base model stay frozen")
    if not n_frozen_layers:
        return f"training every parameter ({total / 1e6:.1f} M)"
    trainable = trainable_parameters(model)
    return (f"training {trainable / 1e6:.1f} M of {total / 1e6:.1f} M parameters "
            f"(embeddings and the first {n_frozen_layers} layers frozen)")
