"""Generation on a card: notebook 01's gpu rollouts and evaluation batches, each path timed on the same prompt.

    python3 .gpu/generation.py [MODEL_1_7B] [MODEL_0_6B]    (device kit; results printed and in $OUT/generation.json)

Random-weight models (build_model.py) never stop early, so every row makes `NEW` tokens (min_new_tokens) and the
time per token step is the recipe's own. Paths, on notebook 01's real prompt (system prompt, `answer` tool, a
chain_sum question; the shared prefix computed once, helpers.compute.generation.generate_shared, as FastGRPOTrainer does):

    full fine-tuning recipe (40 GB cards: fp32 master weights, bf16 autocast)
      rollouts_autocast        4 rows (the gpu profile's generation batch), each forward call its own autocast region,
                               as accelerate wraps the trainer's model: every decode step casts every weight again
      rollouts_reused          the same with helpers.compute.precision.weight_casts_reused allowed on the card
      eval_autocast            64 rows (generate_replies' batch), greedy, one autocast region around the whole batch
      rollouts_bf16            4 rows, the weights themselves in bf16, no autocast: what no casting at all costs
      rollouts_bf16_compiled   the same, letting transformers compile the static-cache decode step (CUDA graphs):
                               first call (compiling) and second call timed separately
    T4 recipe (Qwen3-0.6B's shape, LoRA on every linear layer, fp16 base, no autocast: TRL generates unwrapped)
      lora / lora_merged   4 rows, the adapters beside the base, or merged into it for the generation
                           (helpers.compute.generation.adapters_merged, on by default on a card since this measured it)

The floor of a decode step is reading the weights once at the card's copy bandwidth (measured here).
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from benchmarks.rollouts import held_out_questions, prompt_ids
from helpers.compute.generation import generate_shared, left_pad
from helpers.compute import generation
from helpers.compute import precision
from helpers.compute.precision import weight_casts_reused

DEV = "cuda" if torch.cuda.is_available() else "cpu"   # cpu: a smoke test of this script with tiny models
NEW = int(os.environ.get("NEW", 128))
DEADLINE = time.time() + float(os.environ.get("GEN_SECONDS", 240))
results: dict = {"new_tokens": NEW, "device": torch.cuda.get_device_name(0) if DEV == "cuda" else "cpu",
                 "torch": torch.__version__, "paths": {}}


def save() -> None:
    Path(os.environ.get("OUT", "."), "generation.json").write_text(json.dumps(results, indent=1))


def sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def bandwidth() -> float:
    """Bytes a second a device-to-device copy moves, counting bytes read and written (the card's practical limit)."""
    a = torch.empty(2**30 if DEV == "cuda" else 2**26, dtype=torch.uint8, device=DEV)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    sync()
    started = time.perf_counter()
    for _ in range(10):
        b.copy_(a)
    sync()
    return 2 * 10 * a.numel() / (time.perf_counter() - started)


def per_call(model, dtype):
    """Each forward call in its own autocast region, as accelerate wraps the trainer's model under mixed precision."""
    forward = model.forward

    def wrapped(*args, **kwargs):
        with torch.autocast(DEV, dtype=dtype):
            return forward(*args, **kwargs)

    model.forward = wrapped
    return model


def timed(name, model, tokenizer, rows, *, greedy=False, region=None, compile_=False, weight_bytes=None):
    """Generate NEW tokens for `rows` rows of notebook 01's prompts; record seconds and ms per token step."""
    if time.time() > DEADLINE:
        print(f"skip {name}: past the deadline", flush=True)
        return
    prompts = prompt_ids(tokenizer, held_out_questions(rows))
    ids, mask = left_pad(prompts, tokenizer.pad_token_id, device=DEV)
    sampling = {"do_sample": False} if greedy else {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
    kwargs = dict(max_new_tokens=NEW, min_new_tokens=NEW, pad_token_id=tokenizer.pad_token_id,
                  disable_compile=not compile_, **sampling)
    calls = []
    try:
        for _ in range(2):
            sync()
            started = time.perf_counter()
            with torch.no_grad(), (region or contextlib.nullcontext)():
                out = generate_shared(model, ids, mask, **kwargs)
            sync()
            calls.append(time.perf_counter() - started)
    except Exception as error:   # one path failing (a compile, say) must not cost the others
        results["paths"][name] = {"error": f"{type(error).__name__}: {str(error)[:500]}", "calls_s": calls}
        save()
        print(name, "failed:", results["paths"][name]["error"], flush=True)
        return
    made = out.shape[1] - ids.shape[1]
    seconds = calls[1]
    entry = {"rows": rows, "prompt_tokens": ids.shape[1], "new_tokens": made, "first_call_s": round(calls[0], 2),
             "s": round(seconds, 2), "ms_per_token_step": round(1000 * seconds / made, 2),
             "row_tokens_per_s": round(rows * made / seconds, 1)}
    if weight_bytes:
        entry["floor_ms_per_step"] = round(1000 * weight_bytes / results["bandwidth_Bps"], 3)
    results["paths"][name] = entry
    save()
    print(name, entry, flush=True)


def main() -> None:
    big, small = (sys.argv[1:] + ["/tmp/models/qwen3-1.7b-random", "/tmp/models/qwen3-0.6b-random"])[:2]
    results["bandwidth_Bps"] = bandwidth()
    print(f"copy bandwidth {results['bandwidth_Bps'] / 1e12:.2f} TB/s (read + write)", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(big)
    tokenizer.padding_side = "left"

    # full fine-tuning: fp32 master weights; a decode step reads them (4 bytes) and, cast, writes and reads bf16 (2+2)
    model = AutoModelForCausalLM.from_pretrained(big, dtype=torch.float32).to(DEV)
    n = sum(p.numel() for p in model.parameters())
    results["parameters_1_7b"] = n
    timed("rollouts_autocast", per_call(model, torch.bfloat16), tokenizer, 4, weight_bytes=8 * n)
    precision.CAST_DEVICES.add(DEV)
    with weight_casts_reused(model):
        timed("rollouts_reused", model, tokenizer, 4, weight_bytes=2 * n)
    precision.CAST_DEVICES.discard(DEV)   # the card's other paths as shipped: no copies there
    del model.forward
    timed("eval_autocast", model, tokenizer, 64, greedy=True,
          region=lambda: torch.autocast(DEV, dtype=torch.bfloat16), weight_bytes=2 * n)
    model.to(torch.bfloat16)
    timed("rollouts_bf16", model, tokenizer, 4, weight_bytes=2 * n)
    big_model, big_n = model, n

    # the T4 recipe: LoRA adapters (fp32) on an fp16 base. No autocast: TRL generates with the unwrapped model
    from peft import LoraConfig, get_peft_model

    model = AutoModelForCausalLM.from_pretrained(small, dtype=torch.float16).to(DEV)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear",
                                             task_type="CAUSAL_LM"))
    n = sum(p.numel() for p in model.parameters())
    generation.MERGE_DEVICES.discard(DEV)
    timed("lora", model, tokenizer, 4, weight_bytes=2 * n)
    generation.MERGE_DEVICES.add(DEV)   # helpers.compute.generation.adapters_merged: what a card does since this was measured
    timed("lora_merged", model, tokenizer, 4, weight_bytes=2 * n)
    del model

    # last, as compiling takes the longest: the decode step compiled (static cache, CUDA graphs)
    timed("rollouts_bf16_compiled", big_model, tokenizer, 4, compile_=True, weight_bytes=2 * big_n)
    timed("eval_bf16_compiled", big_model, tokenizer, 64, greedy=True, compile_=True, weight_bytes=2 * big_n)
    if DEV == "cuda":
        results["peak_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    save()


if __name__ == "__main__":
    main()
