"""Profiles: one switch that sets every knob of a notebook for where it runs.

    tiny  CI smoke test: a tiny model, a handful of steps, seconds.
    cpu   a laptop, offline: the real SmolLM2-135M, minutes.
    gpu   the original TRL/OpenEnv tutorials' recipes (Qwen3 on one GPU, Hub access).
    None  gpu when CUDA is available, else cpu.

Each notebook's `parameters` cell (and the "more knobs" cell below it) has PROFILE plus its knobs, all None by
default. The cell after them passes each knob that is a setting by name; one set to anything but None wins over
the profile, and from then on the notebook reads it through `settings` only:

    settings = resolve_settings("01_grpo_walkthrough", PROFILE, max_steps=MAX_STEPS, learning_rate=LEARNING_RATE)
    settings.max_steps

What each profile means for each notebook is its recipe in helpers/recipes.py: change a default there.
"""

from __future__ import annotations

import copy
import difflib

from helpers.compute.hardware import card_class, cpu_native_bf16, detect_gpu, plan_memory
from helpers.recipes import CARD_RECIPES, RECIPES
from helpers.compute.threads import busy_machine, describe as describe_threads
from helpers.startup import THREADS_IN_EFFECT

PROFILE_NAMES = ("tiny", "cpu", "gpu")

# A LoRA run multiplies the profile's learning rates by this (unless LEARNING_RATE is given): the rates below are
# full fine-tuning's, and rank-16 adapters trained at them barely move. Measured on notebook 02's cpu recipe
# (docs/gpu.md#lora-learning-rates): full fine-tuning at 1e-4 reaches 56 % held-out accuracy; LoRA reaches
# 11 % at 1e-4, 12 % at 3e-4 and 44 % at 1e-3.
LORA_LR_MULTIPLIER = 10
LR_KEYS = ("learning_rate", "sft_learning_rate")


# notebook -> profile -> settings, read from each notebook's recipe (helpers.recipes, where they are set).
NOTEBOOK_PROFILES: dict[str, dict[str, dict]] = {notebook: recipe.profiles for notebook, recipe in RECIPES.items()}


class ProfileError(ValueError):
    """An unknown profile, notebook or knob; the message lists the valid ones."""


class Settings(dict):
    """The resolved knobs of one run: a dict that also reads as attributes (`settings.model`).

    `settings.overridden`: the names of the settings a knob set (not None), as opposed to the profile's."""

    overridden: frozenset = frozenset()

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(f"No setting {key!r}; known: {', '.join(self)}") from None

    def __setattr__(self, key, value):
        """`settings.use_vllm = False` changes the setting itself, so what reads it as a key (the memory estimate,
        the run record) sees the change; an unknown name is refused rather than kept beside the settings."""
        if key not in self:
            raise AttributeError(f"No setting {key!r} to change; known: {', '.join(self)}")
        self[key] = value

    def show(self) -> None:
        width = max(map(len, self))
        for key, value in self.items():
            print(f"  {key:<{width}} = {value!r}")


def pick_profile(profile: str | None) -> str:
    """Validate `profile`; None means gpu when CUDA is available, else cpu."""
    if profile is None or profile == "":
        try:
            import torch

            return "gpu" if torch.cuda.is_available() else "cpu"
        except ImportError:
            return "cpu"
    if profile not in PROFILE_NAMES:
        raise ProfileError(f"Unknown PROFILE {profile!r}. Use one of {PROFILE_NAMES} (or None to pick by hardware).")
    return profile


def resolve_settings(notebook: str, profile: str | None = None, *, quiet: bool = False, gpu="detect",
                     **explicit) -> Settings:
    """The profile's defaults for `notebook`, with every explicit non-None knob on top; printed.

    Each knob comes by its setting's name (`max_steps=MAX_STEPS`); a name that is not one of the notebook's settings
    is refused, naming the setting it resembles. Then the recipe's `derived` settings follow the knobs (01: another
    dataset than chain_sum starts from reasoning_gym's default difficulty).

    The gpu profile follows the card (`gpu_recipe`): on a 16 or 24 GB card it takes a smaller
    model and/or LoRA so the run fits; MODEL/LORA set explicitly still win. `gpu`: the card to plan for
    (default: the one detected; tests pass a `helpers.compute.hardware.GPU`).
    """
    if notebook not in NOTEBOOK_PROFILES:
        raise ProfileError(f"No profiles for notebook {notebook!r}; known: {', '.join(NOTEBOOK_PROFILES)}")
    name = pick_profile(profile)
    defaults = copy.deepcopy(NOTEBOOK_PROFILES[notebook][name])
    unknown = sorted(set(explicit) - set(defaults))
    if unknown:
        close = {k: difflib.get_close_matches(k, defaults, n=1, cutoff=0.8) for k in unknown}
        hints = "".join(f" ({k}: did you mean {c[0]}?)" for k, c in close.items() if c)
        raise ProfileError(f"Unknown setting(s) {unknown} for {notebook}{hints}; known: {', '.join(defaults)}")
    overridden = {k: v for k, v in explicit.items() if v is not None}
    card = {}
    if name == "gpu" and "lora" in defaults:
        gpu = detect_gpu() if gpu == "detect" else gpu
        card = {k: v for k, v in gpu_recipe(gpu).items() if k in defaults and k not in overridden}
    slow, no_bf16 = slow_cpu_recipe(notebook, name)
    slow = {k: v for k, v in slow.items() if k in defaults and k not in overridden}
    settings = Settings(profile=name, **{**defaults, **card, **slow, **overridden})
    object.__setattr__(settings, "overridden", frozenset(overridden))
    recipe = RECIPES.get(notebook)
    derived, because = recipe.derived(settings, settings.overridden) if recipe and recipe.derived else ({}, "")
    settings.update(derived)
    if name == "gpu" and "lora" in defaults and gpu:
        card.update(fit_to_card(notebook, settings, gpu, fixed=overridden))
    scaled = lora_learning_rates(settings, fixed=overridden)
    if not quiet:
        how = "given" if profile else "picked by hardware"
        print(f"PROFILE = {name!r} ({how}); overridden: {', '.join(overridden) or 'nothing'}")
        print(describe_threads(THREADS_IN_EFFECT))
        busy = busy_machine()   # another notebook's kernel still training on these cores: say so, once
        if busy:
            print(busy)
        if slow:
            print(f"this CPU has no native bf16 ({no_bf16}), so every pass runs in fp32: the slow-CPU "
                  "recipe sets " + ", ".join(f"{k}={v!r}" for k, v in slow.items()))
        if derived:
            print(f"{because}: " + ", ".join(f"{k}={v!r}" for k, v in derived.items()))
        if card:
            print(f"this {gpu.memory_gib:.0f} GiB card ({card_class(gpu.memory_gib)} class) sets: "
                  + ", ".join(f"{k}={v!r}" for k, v in card.items()))
        if scaled:
            print(f"LoRA: {', '.join(f'{k} {defaults[k]:g} -> {v:g}' for k, v in scaled.items())} "
                  f"(x{LORA_LR_MULTIPLIER}: adapters need a higher rate than full fine-tuning, docs/gpu.md)")
        settings.show()
    return settings


def slow_cpu_recipe(notebook: str, profile: str) -> tuple[dict, str]:
    """(the recipe's `slow_cpu` changes, why) when `profile` is cpu, no CUDA card trains, and this CPU has no native
    bf16 (`helpers.compute.hardware.cpu_native_bf16`); ({}, "") otherwise."""
    changes = RECIPES[notebook].slow_cpu if notebook in RECIPES else {}
    if not changes or profile != "cpu" or detect_gpu():
        return {}, ""
    native, why = cpu_native_bf16()
    return (dict(changes), why) if native is False else ({}, "")


def gpu_recipe(gpu) -> dict:
    """The gpu profile's changes for this card (model, LoRA: `CARD_RECIPES`); empty on a 40 GB+ card or without a GPU."""
    return dict(CARD_RECIPES[card_class(gpu.memory_gib)]) if gpu else {}


def fit_to_card(notebook: str, settings, gpu, *, fixed=()) -> dict:
    """Changes that make `settings` fit `gpu` by the memory estimate (LoRA first, then smaller micro-batches; a tight
    fit is left as it is, since the estimate errs high), leaving the knobs in `fixed` (the ones a user set) alone.
    Applied to `settings` and returned, for the printout."""
    changes = {}
    batch_key = next((k for k in ("per_device_train_batch_size", "batch_size") if k in settings), None)
    while RECIPES[notebook].step_tokens and plan_memory(notebook, settings, gpu).total > gpu.memory_gib:
        if not settings.get("lora") and "lora" in settings and "lora" not in fixed:
            settings["lora"] = changes["lora"] = True
            continue
        batch = settings.get(batch_key, 1) if batch_key else 1
        accumulation = settings.get("gradient_accumulation_steps", 1)
        generations = settings.get("num_generations", 1)
        if batch_key in fixed or batch < 2 or (batch // 2 * accumulation) % generations:
            break
        settings[batch_key] = changes[batch_key] = batch // 2
    return changes


def lora_learning_rates(settings: Settings, *, fixed=()) -> dict:
    """With LoRA on, the profile's learning rates (those not in `fixed`, the user's) times LORA_LR_MULTIPLIER.
    Applied to `settings` and returned, for the printout."""
    if not settings.get("lora"):
        return {}
    scaled = {k: settings[k] * LORA_LR_MULTIPLIER for k in LR_KEYS if k in settings and k not in fixed}
    settings.update(scaled)
    return scaled
