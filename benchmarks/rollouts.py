"""Generation on this machine: a GRPO group and a held-out evaluation, every path against the machine's floor.

    python -m benchmarks.rollouts [--size tiny|full] [--shapes group,evaluation] [--model NAME]

Two shapes, the two places notebook 01 spends its generation time:

    group       one GRPO group: `rollouts` samples of notebook 01's prompt (system prompt + the `answer` tool schema +
                a chain_sum question, ~309 SmolLM2 tokens) at its training temperature (no top-k/top-p, as
                GRPOConfig samples), up to `new_tokens` each, stopping at EOS
    evaluation  notebook 01's held-out evaluation: `questions` different questions (its cpu difficulty, its fixed
                evaluation seed), greedy, up to 128 new tokens; from notebook 02's checkpoint when one exists (the
                model notebook 01 evaluates, which writes its working), else the base model

Paths, each timed on the same inputs:

    group:      repeated         `model.generate` on the prompt repeated: what TRL 1.16's GRPOTrainer does without vLLM
                shared           `helpers.compute.generation.generate_shared`: the prompt prefilled once into a static KV cache
                                 for every row, and in fp32 each decode step reading it once for all rows (what
                                 FastGRPOTrainer's rollouts do)
                shared_bf16      the same under one bf16 autocast region (what an evaluation runs where choose_precision
                                 picks bf16; autocast keeps its casts of weights that need gradients for the region)
                trainer_bf16     the same as GRPOTrainer runs it on a bf16 CPU: notebook 01's first 12 layers frozen and
                                 one autocast region per forward call (accelerate's wrapping), so every decode step
                                 casts every weight again
                trainer_bf16_reused  the same with `helpers.compute.precision.weight_casts_reused` (what generate_shared
                                 enters): each weight cast once per call
                continuous_fork  transformers' continuous batching, one prompt forked `rollouts` times (a reference;
                                 docs/measurements.md has the other continuous-batching variants)
    evaluation: batch8           the first generate_replies: plain `generate`, batches of 8 in question order
                shared_b64       length-sorted batches of 64 with the shared prefix, every row computed until the
                                 batch's longest reply ends (generate_replies until 2026-11-29)
                dropping_b64/128 the same with each finished row leaving the batch and its cache
                                 (`greedy_dropping_finished`); fp32 takes ~150 rows by default (`default_batch_size`)
                shared_b64_bf16, dropping_b256_bf16  the two under bf16 autocast (256: its default there), what a CPU with native bf16 runs
                                 (choose_precision); their floor is at the bf16 large-product rate

The floor of a shape is the least arithmetic it needs (the shared prefix processed once, each row's own prompt
tokens and each generated token once: 2 x parameters + attention FLOPs per token) at the machine's large-product
rate in fp32 (`benchmarks.limits`); every path is reported as floor seconds / its seconds. Evaluation paths also
say whether their greedy replies are identical to batch8's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
import traceback
from pathlib import Path

from benchmarks import figures, limits
from helpers.recipes import RECIPES

SIZES = {  # size -> model, rollouts in a group, group new tokens, evaluation questions
    "tiny": {"model": "tiny", "rollouts": 4, "new_tokens": 8, "questions": 8},
    "full": {"model": "smollm2-135m", "rollouts": 16, "new_tokens": 100, "questions": 150},
}
_CPU = RECIPES["01_grpo_walkthrough"].profiles["cpu"]   # notebook 01's cpu profile, read so the two cannot drift
TEMPERATURE = _CPU["temperature"]
EVAL_NEW_TOKENS = _CPU["eval_max_new_tokens"]
GROUP_PATHS = ("repeated", "shared", "shared_bf16", "trainer_bf16", "trainer_bf16_reused", "continuous_fork")
FROZEN_LAYERS = _CPU["freeze_layers"]
EVAL_PATHS = ("batch8", "shared_b64", "dropping_b64", "dropping_b128", "shared_b64_bf16", "dropping_b256_bf16")
PATHS = GROUP_PATHS + EVAL_PATHS
BASELINE = {"group": "repeated", "evaluation": "batch8"}


def cb_config(prompt_len: int, rollouts: int, new_tokens: int) -> dict:
    """ContinuousBatchingConfig kwargs for one group: a cache just big enough (pages of 32 tokens). TRL's default
    ({"max_memory_percent": 0.5}) sizes the cache from free host memory on CPU: 12 GB resident and 33 s for 4 tiny
    rollouts, measured."""
    page = 32
    pages_per_request = -(-(prompt_len + new_tokens) // page) + 1
    return {"page_size": page, "num_blocks": rollouts * pages_per_request + 4,
            "max_batch_tokens": 2 * prompt_len, "max_memory_percent": 0.5}


def conversations(questions: list[str]) -> list[list[dict]]:
    from helpers.prompts import SYSTEM_PROMPT

    return [[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": q}] for q in questions]


def prompt_ids(tokenizer, questions: list[str]) -> list[list[int]]:
    """Notebook 01's prompts for `questions`, tokenized as the trainer and the evaluation tokenize them."""
    from helpers.prompts import answer_tool

    texts = [tokenizer.apply_chat_template(c, tools=[answer_tool], add_generation_prompt=True, tokenize=False,
                                           enable_thinking=False) for c in conversations(questions)]
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


def held_out_questions(n: int, seed: int | None = None) -> list[str]:
    """Notebook 01's held-out questions at its cpu difficulty (the evaluation's fixed seed by default)."""
    import reasoning_gym

    from helpers.chain_sum.evaluation import EVAL_SEED

    return [d["question"] for d in reasoning_gym.create_dataset(
        "chain_sum", min_terms=2, max_terms=2, min_digits=2, max_digits=2,
        seed=EVAL_SEED if seed is None else seed, size=n)]


def group_prompt(tokenizer) -> list[int]:
    """Notebook 01's prompt for one chain_sum question of its cpu difficulty."""
    return prompt_ids(tokenizer, held_out_questions(1, seed=1))[0]


def rollout_tokens(rows, eos: int) -> int:
    """Tokens generated over `rows` (lists of ids), each counted up to and including its first EOS."""
    return sum(row.index(eos) + 1 if eos in row else len(row) for row in rows)


def floor_seconds(model, prompts: list[list[int]], generated: list[int], gflops: float) -> dict:
    """The least arithmetic a shape needs at `gflops`: the prefix all prompts share once, then each row's own prompt
    tokens and its `generated` tokens, each token costing 2 x parameters plus attention over its context."""
    from helpers.compute.generation import shared_prefix_length

    params = sum(p.numel() for p in model.parameters())
    cfg = model.config
    attention_width = cfg.num_attention_heads * getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads)
    per_context = 4 * cfg.num_hidden_layers * attention_width   # QK^T and attention x V, per token of context
    shared = shared_prefix_length(prompts)
    flops = sum(2 * params + per_context * c for c in range(shared))
    for prompt, new in zip(prompts, generated):
        flops += sum(2 * params + per_context * c for c in range(shared, len(prompt) + new))
    return {"flops": flops, "shared_prefix_tokens": shared, "floor_s": flops / (gflops * 1e9)}


def _group(model, prompt, rollouts, new_tokens, eos, pad, path):
    import torch

    from helpers.compute.generation import generate_shared
    from helpers.compute.precision import autocast

    ids = torch.tensor([prompt] * rollouts)
    kwargs = {"do_sample": True, "temperature": TEMPERATURE, "top_k": 0, "top_p": 1.0, "max_new_tokens": new_tokens,
              "eos_token_id": eos, "pad_token_id": pad}
    if path == "repeated":
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)
    elif path in ("shared", "shared_bf16"):
        with autocast("bf16" if path == "shared_bf16" else None, "cpu"):
            out = generate_shared(model, ids, torch.ones_like(ids), **kwargs)
    elif path.startswith("trainer_bf16"):
        with _as_trainer_runs_it(model, reuse=path.endswith("reused")):
            out = generate_shared(model, ids, torch.ones_like(ids), **kwargs)
    else:
        return _continuous_fork(model, prompt, rollouts, new_tokens, eos, pad)
    return out[:, len(prompt):].tolist()


@contextlib.contextmanager
def _as_trainer_runs_it(model, reuse: bool):
    """`model` with notebook 01's frozen layers and each forward call in its own bf16 autocast region (what
    accelerate's prepare_model does under mixed precision), reusing weight casts or not (generate_shared's
    `weight_casts_reused` left out); restored after."""
    import torch

    from helpers.compute import generation

    frozen = [p for layer in model.model.layers[:FROZEN_LAYERS] for p in layer.parameters() if p.requires_grad]
    forward = model.forward
    casts = generation.weight_casts_reused

    def per_call(*args, **kwargs):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return forward(*args, **kwargs)

    for p in frozen:
        p.requires_grad_(False)
    model.forward = per_call
    if not reuse:
        generation.weight_casts_reused = contextlib.nullcontext
    try:
        yield
    finally:
        generation.weight_casts_reused = casts
        del model.forward
        for p in frozen:
            p.requires_grad_(True)


def _continuous_fork(model, prompt, rollouts, new_tokens, eos, pad):
    from transformers import GenerationConfig
    from transformers.generation import ContinuousBatchingConfig

    config = GenerationConfig(max_new_tokens=new_tokens, do_sample=True, pad_token_id=pad, eos_token_id=[eos],
                              temperature=TEMPERATURE, top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0,
                              cache_implementation=None, disable_compile=True, num_return_sequences=rollouts)
    outputs = model.generate_batch([prompt], generation_config=config, progress_bar=False,
                                   continuous_batching_config=ContinuousBatchingConfig(
                                       **cb_config(len(prompt), rollouts, new_tokens)))
    return [list(o.generated_tokens) for o in outputs.values()]


def _evaluation(model, prompts, eos, pad, path):
    """Greedy replies to every prompt (token lists, in prompt order, cut after EOS) the way the path batches them."""
    from helpers.compute.generation import generate_in_batches, left_pad

    from helpers.compute.precision import autocast

    kwargs = {"do_sample": False, "max_new_tokens": EVAL_NEW_TOKENS, "eos_token_id": eos, "pad_token_id": pad}
    if path == "batch8":    # the first generate_replies: plain generate, batches of 8 in question order
        rows = []
        for start in range(0, len(prompts), 8):
            ids, mask = left_pad(prompts[start:start + 8], pad)
            rows += model.generate(input_ids=ids, attention_mask=mask, **kwargs)[:, ids.shape[1]:].tolist()
    else:
        name, batch = path.removesuffix("_bf16").rsplit("_b", 1)
        with autocast("bf16" if path.endswith("_bf16") else None, "cpu"):
            rows = generate_in_batches(model, prompts, batch_size=int(batch), drop_finished=name == "dropping",
                                       **kwargs)
    return [row[:row.index(eos) + 1] if eos in row else [t for t in row if t != pad] for row in rows]


def _time(call):
    import torch

    torch.manual_seed(0)
    load = os.getloadavg()[0]
    started = time.perf_counter()
    generated = call()
    return generated, time.perf_counter() - started, load


def run(size: str = "full", log_dir: Path | None = None, out=print, model_name: str | None = None,
        shapes: tuple[str, ...] = ("group", "evaluation"), paths: tuple[str, ...] = (),
        replies_to: str | None = None) -> dict:
    """Time every path of `shapes` (or only `paths`); `replies_to`: write evaluation replies beside that name."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from helpers.models import warm_start
    from helpers.model_folders import resolve_model

    spec = SIZES[size]
    machine = limits.measure(0.3 if size == "tiny" else 1.0)
    out(f"machine: fp32 {machine['fp32_large_gflops']} GFLOP/s (large), {machine['fp32_decode_gflops']} (decode shape); "
        f"bf16 {machine['bf16_large_gflops']} / {machine['bf16_decode_gflops']}; copy {machine['copy_gb_per_s']} GB/s; "
        f"{machine['threads']} threads")
    result = {"size": size, "limits": machine, "temperature": TEMPERATURE, "transformers": transformers.__version__,
              "torch_threads": torch.get_num_threads(), "rows": []}
    for shape in shapes:
        name = model_name or spec["model"]
        label = name
        if shape == "evaluation" and not model_name and size == "full":
            path, label = warm_start("01_grpo_walkthrough", name)   # the model notebook 01 evaluates, when notebook 02 has run
        else:
            path = resolve_model(name)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        eos = tokenizer.eos_token_id
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
        if shape == "group":
            prompt = group_prompt(tokenizer)
            prompts = [prompt] * spec["rollouts"]
            calls = {p: (lambda p=p: _group(model, prompt, spec["rollouts"], spec["new_tokens"], eos, pad, p))
                     for p in GROUP_PATHS if not paths or p in paths}
            result["group"] = {"model": label, "rollouts": spec["rollouts"], "prompt_tokens": len(prompt),
                               "max_new_tokens": spec["new_tokens"]}
        else:
            prompts = prompt_ids(tokenizer, held_out_questions(spec["questions"]))
            calls = {p: (lambda p=p: _evaluation(model, prompts, eos, pad, p))
                     for p in EVAL_PATHS if not paths or p in paths}
            result["evaluation"] = {"model": label, "questions": len(prompts), "max_new_tokens": EVAL_NEW_TOKENS,
                                    "prompt_tokens_mean": round(sum(map(len, prompts)) / len(prompts), 1)}
        out(f"\n{shape}: {result[shape]}")
        baseline_replies, trainer_rollouts = {}, None
        with torch.no_grad():
            model.generate(input_ids=torch.tensor([prompts[0][:8]]), max_new_tokens=2, do_sample=False, pad_token_id=pad)
            for path_name, call in calls.items():
                row = {"shape": shape, "path": path_name}
                try:
                    generated, seconds, load = _time(call)
                    lengths = [rollout_tokens([g], eos) for g in generated]
                    bf16 = path_name.endswith("_bf16")
                    floor = floor_seconds(model, prompts, lengths,
                                          machine["bf16_large_gflops" if bf16 else "fp32_large_gflops"])
                    tokens = sum(lengths)
                    if shape == "evaluation":
                        row["replies_per_s"] = round(len(prompts) / seconds, 2)
                    row.update(seconds=round(seconds, 3), tokens=tokens, tokens_per_s=round(tokens / seconds, 1),
                               floor_s=round(floor["floor_s"], 3), of_floor=round(floor["floor_s"] / seconds, 3),
                               shared_prefix_tokens=floor["shared_prefix_tokens"], load_average=round(load, 2))
                    against = "shared_b64_bf16" if bf16 else "batch8"
                    if shape == "evaluation" and against in calls:
                        baseline_replies.setdefault(against, generated)
                        row["same_replies"] = sum(a == b for a, b in zip(generated, baseline_replies[against]))
                        row["same_as"] = against
                    if shape == "evaluation" and replies_to:   # to compare two environments' greedy replies
                        Path(f"{replies_to}.{path_name}.json").write_text(json.dumps(generated))
                    if path_name == "trainer_bf16":
                        trainer_rollouts = generated
                    elif path_name == "trainer_bf16_reused" and trainer_rollouts is not None:   # the same draws
                        row["same_tokens_as_trainer_bf16"] = generated == trainer_rollouts
                    out(f"  {path_name:<16} {seconds:7.2f} s  {tokens:6d} tokens  {tokens / seconds:7.1f} tokens/s  "
                        f"{row['of_floor']:6.1%} of the floor ({row['floor_s']} s)"
                        + (f"  {row['replies_per_s']} replies/s  same replies {row['same_replies']}/{len(prompts)} "
                           f"as {row['same_as']}" if "same_replies" in row else "")
                        + (f"  same tokens as trainer_bf16: {row['same_tokens_as_trainer_bf16']}"
                           if "same_tokens_as_trainer_bf16" in row else ""))
                except Exception as exc:   # a path that fails here is a result: keep the error, measure the others
                    row.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()[-2000:])
                    out(f"  {path_name:<16} FAILED: {row['error']}")
                result["rows"].append(row)
        base = next((r for r in result["rows"] if r["path"] == BASELINE[shape] and "seconds" in r), None)
        for r in result["rows"]:
            if r["shape"] == shape and base and "tokens_per_s" in r:
                r["speedup"] = round(r["tokens_per_s"] / base["tokens_per_s"], 2)
    return result


def plot(result: dict, path: Path) -> Path:
    plt = figures.pyplot()
    shapes = [s for s in ("group", "evaluation") if s in result]
    fig, axes = plt.subplots(1, len(shapes), figsize=(5 * len(shapes), 3), squeeze=False)
    for ax, shape in zip(axes[0], shapes):
        ok = [r for r in result["rows"] if r["shape"] == shape and "of_floor" in r]
        ax.bar([r["path"] for r in ok], [100 * r["of_floor"] for r in ok], color="#4c72b0")
        ax.set_ylabel("% of the machine's floor")
        ax.set_title(f"{shape}: {result[shape]['model'][:40]}", fontsize=8)
        ax.tick_params(axis="x", labelsize=7, rotation=20)
    return figures.save(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=list(SIZES), default="full")
    parser.add_argument("--model", default=None, help="a model name for helpers.model_folders.resolve_model")
    parser.add_argument("--shapes", default="group,evaluation", help="comma-separated subset of group, evaluation")
    parser.add_argument("--paths", default="", help=f"comma-separated subset of {', '.join(PATHS)} (default: all)")
    parser.add_argument("--replies", default=None,
                        help="write each evaluation path's token ids to REPLIES.<path>.json (to compare two stacks)")
    args = parser.parse_args()
    paths = tuple(p for p in args.paths.split(",") if p)
    unknown = sorted(set(paths) - set(PATHS))
    if unknown:
        parser.error(f"unknown path(s) {', '.join(unknown)}: choose from {', '.join(PATHS)}")
    print(json.dumps(run(args.size, model_name=args.model, shapes=tuple(args.shapes.split(",")), paths=paths,
                         replies_to=args.replies), indent=1))


if __name__ == "__main__":
    main()
