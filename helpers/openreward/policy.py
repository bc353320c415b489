"""The policy notebook 04 trains, loaded in one call: the memory check, the model, its frozen layers, the
tokenizer and the training precision.

    model, tokenizer, precision = load_student(NOTEBOOK, settings)

None of this is the OpenReward lesson, so the notebook names it in one line; the same steps, in the same order,
as notebooks 01-03 spell them out.
"""

from __future__ import annotations

from helpers.compute.hardware import check_memory
from helpers.compute.precision import choose_precision
from helpers.model_folders import resolve_model
from helpers.models import freeze_lower_layers, load_policy


def load_student(notebook: str, settings, *, seed: int | None = None):
    """(model, tokenizer, precision) for `settings.model`, printed with its size, device and precision.

    Checks memory first (prints the estimate; stops with what to set if it will not fit), loads the policy on the
    GPU when there is one (evaluation and training run there), LoRA if `settings.lora`, freezes the lower
    `settings.freeze_layers` layers, and picks the precision (`settings.precision`: "auto" is timed here on CPU,
    the card's native type on CUDA) that the evaluations and the trainers share. `seed`: torch's, before loading
    (LoRA adapters start the same for the same seed)."""
    from transformers import AutoTokenizer

    if not getattr(settings, "model", None):
        raise ValueError(f"{notebook}: no model to load (settings.model is {getattr(settings, 'model', None)!r}); "
                         "set MODEL, or leave it None for the profile's.")
    model_path = resolve_model(settings.model)
    check_memory(notebook, settings, model=model_path)   # prints the estimate; stops here if it will not fit
    model = load_policy(model_path, lora=settings.lora, seed=seed)
    freeze_lower_layers(model, settings.freeze_layers)    # cpu: the lower 12 of 30 layers (SFT and GRPO), as in 01/02
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    precision = choose_precision(model, settings.precision)
    print(f"{settings.model}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters on {model.device}")
    print(precision)
    return model, tokenizer, precision
