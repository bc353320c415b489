"""The GRPO loss pass on this machine: one micro-batch's forward and backward, every path against the floor.

    python -m benchmarks.loss_pass [--size tiny|full] [--path plain|compact|shared] [--precision fp32|bf16]

Notebook 01's `cpu` micro-batch: 4 rollouts (two questions, two rows each) of the real prompt (system prompt,
tool schema, a chain_sum question: ~350 tokens) and completions of 64-100 tokens (random ids: the arithmetic does
not depend on them), SmolLM2-135M with its lowest `FREEZE_LAYERS=12` layers frozen, scored by TRL's own fused LM
head as GRPOTrainer patches it in, loss backward. Paths (helpers/compute/loss_forward.py):

- `plain`: TRL 1.16 as shipped: every row's whole prompt, and on a CPU every position projected onto the vocabulary;
- `compact`: only the completions' positions projected (`completions_only_scored`);
- `shared`: that, and the prompt prefix all rows share computed once (`forward_prefix_shared`, what FastGRPOTrainer does).

The floor is the least arithmetic the pass needs: each distinct token once through the frozen layers (forward)
and the trained ones (forward and two backward products), and each completion token through the LM head (forward
and the hidden state's gradient), at the machine's large-product rate in that precision (`benchmarks.limits`).
`--path`/`--precision` time one combination only (for timing the whole process, path against path).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from pathlib import Path

from benchmarks import figures, limits

PATHS = ("plain", "compact", "shared")
SIZES = {"tiny": {"model": "tiny-toolcall", "freeze": 1, "repeats": 1, "precisions": ("fp32",)},
         "full": {"model": "smollm2-135m", "freeze": 12, "repeats": 3, "precisions": ("fp32", "bf16")}}
ROWS, COMPLETION_TOKENS = 4, (64, 76, 88, 100)


def micro_batch(tokenizer, vocab: int):
    """GRPOTrainer's layout for one micro-batch: left-padded prompts, right-padded completions, labels on the
    completions only."""
    import reasoning_gym
    import torch

    from helpers.prompts import CHAIN_SUM_CONFIG, SYSTEM_PROMPT, answer_tool

    questions = [d["question"] for d in reasoning_gym.create_dataset("chain_sum", seed=1, size=2, **CHAIN_SUM_CONFIG)]
    prompts = [tokenizer.apply_chat_template([{"role": "system", "content": SYSTEM_PROMPT},
                                              {"role": "user", "content": questions[i // 2]}],
                                             tools=[answer_tool], add_generation_prompt=True, tokenize=True,
                                             enable_thinking=False, return_dict=False) for i in range(ROWS)]
    gen = torch.Generator().manual_seed(0)
    completions = [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in COMPLETION_TOKENS]
    wp, wc = max(map(len, prompts)), max(map(len, completions))
    ids = torch.tensor([[0] * (wp - len(p)) + p + c + [0] * (wc - len(c)) for p, c in zip(prompts, completions)])
    mask = torch.tensor([[0] * (wp - len(p)) + [1] * (len(p) + len(c)) + [0] * (wc - len(c))
                         for p, c in zip(prompts, completions)])
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :wp] = -100
    return ids, mask, labels, prompts


def floor_flops(model, frozen: int, prompts: list[list[int]]) -> float:
    """The pass's least arithmetic: distinct tokens through the frozen layers (2 x parameters) and the trained
    ones (6 x parameters: forward and two backward products), completion tokens through the LM head (4 x its size)."""
    from helpers.compute.generation import shared_prefix_length

    layers = model.model.layers
    per_layer = sum(p.numel() for p in layers[0].parameters())
    trained = len(layers) - frozen
    shared = shared_prefix_length(prompts)
    distinct = shared + sum(len(p) - shared for p in prompts) + sum(COMPLETION_TOKENS)
    head = model.config.vocab_size * model.config.hidden_size
    return distinct * (2 * frozen * per_layer + 6 * trained * per_layer) + sum(COMPLETION_TOKENS) * 4 * head


def time_path(model, batch, path: str, precision: str, repeats: int) -> float:
    """Median seconds of one forward + backward on `batch` along `path` (after one untimed pass)."""
    from helpers.compute.loss_forward import completions_only_scored, forward_prefix_shared
    from helpers.compute.precision import autocast

    ids, mask, labels, _ = batch
    path_context = {"shared": lambda: forward_prefix_shared(model), "compact": completions_only_scored}.get(
        path, contextlib.nullcontext)
    times = []
    with path_context():
        for i in range(repeats + 1):
            model.zero_grad(set_to_none=True)
            began = time.perf_counter()
            with autocast(precision if precision == "bf16" else None, "cpu"):
                out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
            (-(out.log_probs * (labels[:, 1:] != -100)).sum()).backward()
            if i:
                times.append(time.perf_counter() - began)
    return statistics.median(times)


def load(size: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.trainer.utils import add_fused_lm_head

    from helpers.models import freeze_lower_layers
    from helpers.model_folders import resolve_model

    spec = SIZES[size]
    path = resolve_model(spec["model"])
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    add_fused_lm_head(model, temperature=0.9, outputs=("log_probs", "entropy"))   # as GRPOTrainer does
    freeze_lower_layers(model, spec["freeze"])
    return model, tokenizer


def run(size: str = "full", log_dir: Path | None = None, out=print, paths=PATHS, precisions=None) -> dict:
    import torch

    spec = SIZES[size]
    machine = limits.measure(0.3 if size == "tiny" else 1.0)
    model, tokenizer = load(size)
    batch = micro_batch(tokenizer, model.config.vocab_size)
    flops = floor_flops(model, spec["freeze"], batch[3])
    result = {"size": size, "model": spec["model"], "frozen_layers": spec["freeze"], "limits": machine,
              "rows": ROWS, "tokens_per_row": int(batch[1].shape[1]), "completion_tokens": list(COMPLETION_TOKENS),
              "torch_threads": torch.get_num_threads(), "floor_gflop": round(flops / 1e9, 1), "results": []}
    out(f"{spec['model']}, {ROWS} rows of up to {batch[1].shape[1]} tokens, floor {flops / 1e9:.0f} GFLOP; machine: "
        f"fp32 {machine['fp32_large_gflops']} GFLOP/s, bf16 {machine['bf16_large_gflops']} (large products)")
    for precision in precisions or spec["precisions"]:
        plain = None
        for path in paths:
            seconds = time_path(model, batch, path, precision, spec["repeats"])
            plain = plain or (seconds if path == "plain" else None)
            floor_s = flops / (machine[f"{precision}_large_gflops"] * 1e9)
            row = {"precision": precision, "path": path, "seconds": round(seconds, 3),
                   "speedup": round(plain / seconds, 2) if plain else None,
                   "floor_s": round(floor_s, 3), "of_floor": round(floor_s / seconds, 3)}
            result["results"].append(row)
            out(f"  {precision} {path:8s} {seconds:6.2f} s" + (f"  {row['speedup']:.2f}x plain" if plain else "")
                + f"  {row['of_floor']:6.1%} of the floor ({row['floor_s']} s)")
    return result


def plot(result: dict, path: Path) -> Path:
    plt = figures.pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    precisions = sorted({r["precision"] for r in result["results"]})
    width = 0.8 / max(1, len(precisions))
    for i, precision in enumerate(precisions):
        rows = [r for r in result["results"] if r["precision"] == precision]
        ax.bar([j + i * width for j in range(len(rows))], [r["seconds"] for r in rows], width, label=precision)
        ax.set_xticks([j + width * (len(precisions) - 1) / 2 for j in range(len(rows))], [r["path"] for r in rows])
    ax.set(ylabel="seconds, forward + backward of one micro-batch",
           title=f"GRPO loss pass, {result['model']} ({result['rows']} rows)")
    ax.legend()
    return figures.save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--path", choices=PATHS, default=None, help="time this path only")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default=None, help="in this precision only")
    args = parser.parse_args()
    result = run(args.size, paths=(args.path,) if args.path else PATHS,
                 precisions=(args.precision,) if args.precision else None)
    print(json.dumps(result["results"], indent=2))


if __name__ == "__main__":
    main()
