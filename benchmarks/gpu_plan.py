"""The memory plan of every notebook's `gpu` profile on each card class: the table in docs/gpu.md.

    python -m benchmarks.gpu_plan

A maintainer's tool on top of helpers (profiles resolve the recipe, hardware estimates it), so that hardware
never imports profiles.
"""

from __future__ import annotations

from helpers.compute.hardware import CARDS, GPU, fit_verdict, plan_memory
from helpers.compute.hardware import cuda_precision
from helpers.profiles import resolve_settings
from helpers.recipes import RECIPES


def plan_table(cards: dict[str, GPU]) -> str:
    """Markdown: for every training notebook and card, what the gpu profile picks and the estimate."""
    rows = ["| notebook | card | model | LoRA | micro-batch | precision | estimate | fits |",
            "|---|---|---|---|---:|---|---:|---|"]
    for notebook in sorted(name for name, recipe in RECIPES.items() if recipe.step_tokens):
        for label, gpu in cards.items():
            settings = resolve_settings(notebook, "gpu", gpu=gpu, quiet=True)
            estimate = plan_memory(notebook, settings, gpu)
            batch = settings.get("per_device_train_batch_size", settings.get("batch_size"))
            fits = fit_verdict(estimate, gpu.memory_gib)
            rows.append(f"| {notebook} | {label} | {settings.model} | {settings.lora} | {batch} | "
                        f"{cuda_precision(gpu.capability)} | {estimate.total:.1f} GiB | {fits} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(plan_table(CARDS))
