"""Precision: seconds per training step and per generation in fp32 and in bf16 autocast, on this CPU.

    python -m benchmarks.precision [--size tiny|full]

What `helpers.compute.precision.choose_precision` decides at a notebook's start, measured at the shapes
the notebooks really run: an SFT step of notebook 02 (batch 8 x 390 tokens, forward + backward),
and a rollout generation of notebook 01 (16 sequences, 309-token prompt, 64 new tokens). The CPU's
model name and its bf16-related flags are recorded: bf16 is fast only where the CPU has
AVX512-BF16 or AMX; elsewhere oneDNN emulates it and it is slower than fp32.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from benchmarks import figures
from helpers.compute.precision import autocast, time_training_pass

SHAPES = {  # size -> (model, train batch, train tokens, generate sequences, prompt tokens, new tokens)
    "tiny": ("tiny", 2, 64, 4, 64, 8),
    "full": ("smollm2-135m", 8, 390, 16, 309, 64),
}
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "amx_tile", "avx512f", "avx_vnni", "avx512_fp16")


def cpu_description() -> dict:
    """The CPU's model name and which bf16-related instruction sets it reports (Linux)."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and ":" in line:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {"model_name": name, "flags": [f for f in BF16_FLAGS if f in flags]}


def time_generate(model, precision: str, *, sequences: int, prompt_tokens: int, new_tokens: int) -> float:
    """Seconds for one greedy `generate` of `sequences` rows (prefill + decode), after a short warm-up."""
    import torch

    vocab = model.get_input_embeddings().num_embeddings
    ids = torch.randint(0, vocab, (sequences, prompt_tokens), generator=torch.Generator().manual_seed(0))
    model.eval()
    with torch.no_grad(), autocast(precision):
        model.generate(input_ids=ids[:, :8], max_new_tokens=2, min_new_tokens=2, do_sample=False, pad_token_id=0)
        started = time.perf_counter()
        model.generate(input_ids=ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                       pad_token_id=0)
    return time.perf_counter() - started


def run(size: str = "full", log_dir: Path | None = None, out=print) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from helpers.model_folders import resolve_model

    name, batch, tokens, sequences, prompt, new = SHAPES[size]
    model = AutoModelForCausalLM.from_pretrained(resolve_model(name), dtype=torch.float32)
    rows = []
    for precision in ("fp32", "bf16"):
        step = time_training_pass(model, precision, batch_size=batch, seq_len=tokens, repeats=2)
        probe = time_training_pass(model, precision)   # the shape choose_precision times at start-up
        gen = time_generate(model, precision, sequences=sequences, prompt_tokens=prompt, new_tokens=new)
        rows.append({"precision": precision, "train_step_s": round(step, 3), "probe_pass_s": round(probe, 3),
                     "generate_s": round(gen, 3), "generate_tokens_per_s": round(sequences * new / gen, 1)})
        out(f"{precision}: training step {step:.2f} s (batch {batch} x {tokens}), start-up probe {probe:.2f} s, "
            f"generate {gen:.2f} s ({sequences} x {prompt}+{new} tokens)")
    return {"size": size, "model": name, "cpu": cpu_description(), "torch_threads": torch.get_num_threads(),
            "shapes": {"train": [batch, tokens], "generate": [sequences, prompt, new]}, "rows": rows}


def plot(result: dict, path: Path) -> Path:
    plt = figures.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    names = [r["precision"] for r in result["rows"]]
    for ax, key, title in ((axes[0], "train_step_s", "training step (s)"), (axes[1], "generate_s", "generate (s)")):
        ax.bar(names, [r[key] for r in result["rows"]], color=["#4c72b0", "#dd8452"])
        ax.set_title(title)
    fig.suptitle(f"{result['model']} on {result['cpu']['model_name']}", fontsize=9)
    return figures.save(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=list(SHAPES), default="full")
    print(json.dumps(run(parser.parse_args().size), indent=1))


if __name__ == "__main__":
    main()
