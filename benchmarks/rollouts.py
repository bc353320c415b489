"""Rollouts: how fast can one GRPO group of rollouts be generated on this machine, and what does it cost today?

    python -m benchmarks.rollouts [--size tiny|full] [--model NAME] [--paths repeated,floor,...]
                                   [--rollouts N] [--new-tokens N]

One group = `rollouts` samples of notebook 01's prompt (system prompt + the `answer` tool schema + a
chain_sum question; ~309 SmolLM2 tokens), at a training temperature (1.2, no top-k/top-p, as GRPOConfig
samples), up to `new_tokens` each, stopping at EOS. The same group is generated four ways, side by side:

    repeated      `model.generate` on the prompt repeated `rollouts` times: what TRL 1.16's GRPOTrainer does
                  without vLLM (`_generate_single_turn`: every row of the group is its own prompt)
    return_seqs   `model.generate(num_return_sequences=rollouts)` on one prompt: transformers expands the input
                  to `rollouts` rows before the prefill (`_expand_inputs_for_generation`), so the prefill is
                  still paid `rollouts` times; measured to show it
    continuous    transformers' continuous batching (`generate_batch`, paged KV cache) called as GRPOTrainer
                  calls it with `use_transformers_continuous_batching=True`; the KV cache sized explicitly
                  (see CB_CONFIG: TRL's default sizes it from free host memory on CPU), prefix sharing allowed,
                  and the number of prompt tokens it reused from the cache counted
    continuous_fork  the same with one prompt and `num_return_sequences=rollouts`: continuous batching prefills
                  it once and forks the request, sharing the prompt's full pages (not what TRL 1.16 calls:
                  it passes the prompt repeated)
    floor         one prefill of the prompt, its KV cache copied to `rollouts` rows, then one batched decode
                  loop with that cache: the least work a group needs, timed directly

Reported per path: seconds, rollout tokens generated (up to and including EOS) and rollout tokens per second.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
import traceback
from pathlib import Path

from benchmarks import figures

SHAPES = {  # size -> (model, rollouts, new tokens)
    "tiny": ("tiny", 4, 8),
    "full": ("smollm2-135m", 16, 100),
}
TEMPERATURE = 1.2            # notebook 01's cpu profile when docs/measurements.md's numbers were taken (0.9 since)
PATHS = ("repeated", "return_seqs", "continuous", "continuous_fork", "floor")


def cb_config(prompt_len: int, rollouts: int, new_tokens: int) -> dict:
    """ContinuousBatchingConfig kwargs for one group: a cache just big enough (pages of 32 tokens) and batches of
    at most two prompts' worth of tokens, so the first prompt's pages are complete and shareable before the
    others are prefilled. TRL's default ({"max_memory_percent": 0.5}) sizes the cache from free host memory on
    CPU: 12 GB resident and 33 s for 4 tiny rollouts, measured."""
    page = 32
    pages_per_request = -(-(prompt_len + new_tokens) // page) + 1
    return {"page_size": page, "num_blocks": rollouts * pages_per_request + 4,
            "max_batch_tokens": 2 * prompt_len, "max_memory_percent": 0.5}


def group_prompt(tokenizer) -> list[int]:
    """Notebook 01's prompt for one chain_sum question of its cpu difficulty, as the trainer tokenizes it."""
    import reasoning_gym

    from helpers.prompts import SYSTEM_PROMPT, answer_tool

    question = reasoning_gym.create_dataset("chain_sum", min_terms=2, max_terms=2, min_digits=2, max_digits=2,
                                            seed=1, size=1)[0]["question"]
    text = tokenizer.apply_chat_template([{"role": "system", "content": SYSTEM_PROMPT},
                                          {"role": "user", "content": question}], tools=[answer_tool],
                                         add_generation_prompt=True, tokenize=False, enable_thinking=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def rollout_tokens(rows, eos: int) -> int:
    """Tokens generated over `rows` (lists of ids), each counted up to and including its first EOS."""
    return sum(row.index(eos) + 1 if eos in row else len(row) for row in rows)


def _generate(model, prompt, rollouts, new_tokens, eos, pad, repeat: bool):
    import torch

    ids = torch.tensor([prompt] * (rollouts if repeat else 1))
    kwargs = {} if repeat else {"num_return_sequences": rollouts}
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=TEMPERATURE,
                         top_k=0, top_p=1.0, max_new_tokens=new_tokens, eos_token_id=eos, pad_token_id=pad, **kwargs)
    return out[:, len(prompt):].tolist()


def _floor(model, prompt, rollouts, new_tokens, eos):
    import torch

    out = model(input_ids=torch.tensor([prompt]), use_cache=True, logits_to_keep=1)
    cache = out.past_key_values
    cache.batch_repeat_interleave(rollouts)          # the prompt's keys and values, shared by every row
    logits = out.logits[:, -1].expand(rollouts, -1)
    rows = torch.empty(rollouts, 0, dtype=torch.long)
    done = torch.zeros(rollouts, dtype=torch.bool)
    for _ in range(new_tokens):
        token = torch.multinomial(torch.softmax(logits.float() / TEMPERATURE, dim=-1), 1)
        rows = torch.cat([rows, token], dim=1)
        done |= token[:, 0] == eos
        if done.all():
            break
        logits = model(input_ids=token, past_key_values=cache, use_cache=True).logits[:, -1]
    return rows.tolist()


class _PrefixCounter(logging.Filter):
    """Counts the prompt tokens continuous batching took from its prefix cache (its debug log says each match),
    and drops the debug records: generate_batch swaps the logger's handlers (tqdm), so a filter is what holds."""

    def __init__(self):
        super().__init__()
        self.tokens = 0

    def filter(self, record):
        message = record.getMessage()
        if message.startswith("Found a prefix match of "):
            self.tokens += int(message.split()[5])
        return record.levelno >= logging.WARNING


def _continuous(model, prompt, rollouts, new_tokens, eos, pad, fork: bool = False):
    from transformers import GenerationConfig
    from transformers.generation import ContinuousBatchingConfig

    # the generation config GRPOTrainer builds (TRL 1.16, GRPOTrainer.__init__), and its call
    config = GenerationConfig(max_new_tokens=new_tokens, do_sample=True, pad_token_id=pad, eos_token_id=[eos],
                              temperature=TEMPERATURE, top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0,
                              cache_implementation=None, disable_compile=True,
                              **({"num_return_sequences": rollouts} if fork else {}))
    outputs = model.generate_batch([prompt] * (1 if fork else rollouts), generation_config=config, progress_bar=False,
                                   continuous_batching_config=ContinuousBatchingConfig(
                                       **cb_config(len(prompt), rollouts, new_tokens)))
    return [list(o.generated_tokens) for o in outputs.values()]


def run(size: str = "full", log_dir: Path | None = None, out=print, model_name: str | None = None,
        paths: tuple[str, ...] = PATHS, rollouts: int | None = None, new_tokens: int | None = None) -> dict:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from helpers.models import resolve_model

    name, default_rollouts, default_new = SHAPES[size]
    name, rollouts, new_tokens = model_name or name, rollouts or default_rollouts, new_tokens or default_new
    path = resolve_model(name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    prompt = group_prompt(tokenizer)
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    counter = _PrefixCounter()
    from transformers.generation.continuous_batching.utils import logger as cb_logger   # where the cache logs
    calls = {
        "repeated": lambda: _generate(model, prompt, rollouts, new_tokens, eos, pad, repeat=True),
        "return_seqs": lambda: _generate(model, prompt, rollouts, new_tokens, eos, pad, repeat=False),
        "continuous": lambda: _continuous(model, prompt, rollouts, new_tokens, eos, pad),
        "continuous_fork": lambda: _continuous(model, prompt, rollouts, new_tokens, eos, pad, fork=True),
        "floor": lambda: _floor(model, prompt, rollouts, new_tokens, eos),
    }
    rows = []
    with torch.no_grad():
        model.generate(input_ids=torch.tensor([prompt[:8]]), max_new_tokens=2, do_sample=False, pad_token_id=pad)
        for path_name in paths:
            row = {"path": path_name}
            torch.manual_seed(0)
            counter.tokens = 0
            level = cb_logger.level
            if path_name == "continuous":      # count the cache's debug lines about prefix matches
                cb_logger.addFilter(counter)
                cb_logger.setLevel(logging.DEBUG)
            load = os.getloadavg()[0]
            started = time.perf_counter()
            try:
                generated = calls[path_name]()
                seconds = time.perf_counter() - started
                tokens = rollout_tokens(generated, eos)
                row.update(seconds=round(seconds, 3), rollout_tokens=tokens, tokens_per_s=round(tokens / seconds, 1),
                           longest=max(len(r) for r in generated), load_average=round(load, 2))
                if path_name == "continuous":
                    row["prefix_tokens_reused"] = counter.tokens
                if path_name.startswith("continuous"):
                    row["config"] = cb_config(len(prompt), rollouts, new_tokens)
                out(f"{path_name:<12} {seconds:7.2f} s  {tokens:5d} rollout tokens  {tokens / seconds:7.1f} tokens/s"
                    + (f"  ({counter.tokens} prompt tokens from the prefix cache)" if path_name == "continuous" else ""))
            except Exception as exc:   # a path that fails here is a result: keep the error, measure the others
                row.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()[-2000:])
                out(f"{path_name:<12} FAILED: {row['error']}")
            finally:
                cb_logger.removeFilter(counter)
                cb_logger.setLevel(level)
            rows.append(row)
    return {"size": size, "model": name, "rollouts": rollouts, "prompt_tokens": len(prompt),
            "max_new_tokens": new_tokens, "temperature": TEMPERATURE, "torch_threads": torch.get_num_threads(),
            "transformers": transformers.__version__, "rows": rows}


def plot(result: dict, path: Path) -> Path:
    plt = figures.pyplot()
    ok = [r for r in result["rows"] if "tokens_per_s" in r]
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.bar([r["path"] for r in ok], [r["tokens_per_s"] for r in ok], color="#4c72b0")
    ax.set_ylabel("rollout tokens / s")
    ax.set_title(f"{result['rollouts']} rollouts of a {result['prompt_tokens']}-token prompt, {result['model']}",
                 fontsize=9)
    return figures.save(fig, path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=list(SHAPES), default="full")
    parser.add_argument("--model", default=None, help="a model name for helpers.models.resolve_model (default: the size's)")
    parser.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated subset of {', '.join(PATHS)}")
    parser.add_argument("--rollouts", type=int, default=None, help="rollouts in the group (default: the size's)")
    parser.add_argument("--new-tokens", type=int, default=None, help="max new tokens per rollout (default: the size's)")
    args = parser.parse_args()
    print(json.dumps(run(args.size, model_name=args.model, paths=tuple(args.paths.split(",")), rollouts=args.rollouts,
                         new_tokens=args.new_tokens), indent=1))


if __name__ == "__main__":
    main()
