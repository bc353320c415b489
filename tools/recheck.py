"""Re-score a trained model against its start on more held-out questions: is the change more than noise?

Notebook 01's `cpu` profile scores 900 held-out sums before and after GRPO (its recipe's `eval_n`), a paired
95 % interval of about +-3 points (what its runs gained: docs/results.md). The interval narrows with the square
root of the number of questions, so this scores both models on the same `n` questions, by default twice the
notebook's (`default_n`: 1800 for `cpu`, the notebook's 900 first, in the same order, then 900 it never saw), and
prints the paired change:

    python -m tools.recheck runs/02_sft_warmup/checkpoint runs/01_grpo_walkthrough/model

`--n` sets another count; one no larger than the notebook's re-scores only questions it already scored (it says so).
Greedy replies like the notebook's evaluation, in fp32 unless `--precision` says otherwise; on 2 AVX2-only CPU
cores SmolLM2-135M takes about a second a question per model, so the default 1800 take about an hour for the two. The result is written to runs/recheck/recheck.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from helpers.chain_sum.evaluation import evaluate_policy
from helpers.models import load_policy
from helpers.profiles import resolve_settings
from helpers.prompts import system_prompt_for
from helpers.recipes import RECIPES
from helpers.reporting.intervals import paired_change
from helpers.runs import run_dir
from helpers.servers import server_or_url

NB = "01_grpo_walkthrough"


def default_n(profile: str = "cpu") -> int:
    """Twice the questions the profile's notebook 01 scores: the notebook's own, then as many it never saw."""
    return 2 * RECIPES[NB].profiles[profile]["eval_n"]


def recheck(before: str, after: str, base_url: str, *, n: int, dataset_name: str = "chain_sum",
            dataset_config: dict | None = None, max_new_tokens: int = 128, precision: str | None = None,
            progress: bool = True) -> dict:
    """Score the models in folders `before` and `after` on the same `n` held-out questions; the paired change."""
    from transformers import AutoTokenizer

    results = {}
    for label, folder in (("before", before), ("after", after)):
        model = load_policy(folder)
        results[label] = evaluate_policy(model, AutoTokenizer.from_pretrained(folder), base_url,
                                         dataset_name=dataset_name, dataset_config=dataset_config, n=n,
                                         system_prompt=system_prompt_for(dataset_name),
                                         max_new_tokens=max_new_tokens, precision=precision, progress=progress)
        print(f"{label}: {results[label]}", flush=True)
        del model
    change = paired_change(results["before"], results["after"])
    print(change, flush=True)
    return {"n": n, "before": before, "after": after, "dataset_name": dataset_name, "dataset_config": dataset_config,
            "accuracy_before": results["before"].accuracy, "accuracy_after": results["after"].accuracy,
            "change": change.change, "change_ci": list(change.ci), "gained": change.gained, "lost": change.lost}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", help="the start model's folder (notebook 02's checkpoint)")
    parser.add_argument("after", help="the trained model's folder (notebook 01 saves it as runs/01_grpo_walkthrough/model)")
    parser.add_argument("--n", type=int, default=None,
                        help="held-out questions (default: twice what the profile's notebook scores, 1800 for cpu)")
    parser.add_argument("--profile", default="cpu", choices=["tiny", "cpu", "gpu"],
                        help="whose chain_sum difficulty and evaluation length to use (default cpu)")
    parser.add_argument("--env-base-url", default=None, help="a reasoning_gym server; default: start one locally")
    parser.add_argument("--precision", default=None, choices=["fp32", "bf16", "fp16"],
                        help="generate under this autocast (default: the weights' own, fp32)")
    args = parser.parse_args(argv)
    for folder in (args.before, args.after):
        if not (Path(folder) / "config.json").exists():
            parser.error(f"{folder}: no model there (no config.json). Pass the folders notebook 02 and notebook 01 "
                         "saved: runs/02_sft_warmup/checkpoint and runs/01_grpo_walkthrough/model (after a LoRA run, "
                         "its -merged folder: SAVE_MERGED=True).")
    settings = resolve_settings(NB, args.profile)
    n = args.n if args.n is not None else default_n(args.profile)
    if n <= settings.eval_n:
        print(f"note: the notebook's {args.profile} profile already scored these {n} questions (its first "
              f"{settings.eval_n}); a larger --n adds questions it never saw.", flush=True)
    out = run_dir("recheck")
    url, server = server_or_url(args.env_base_url, "reasoning_gym_env.server.app:app", name="reasoning_gym",
                                log_dir=out / "logs")
    try:
        record = recheck(args.before, args.after, url, n=n, dataset_name=settings.dataset_name,
                         dataset_config=settings.dataset_config, max_new_tokens=settings.eval_max_new_tokens,
                         precision=args.precision)
    finally:
        if server:
            server.stop()
    (out / "recheck.json").write_text(json.dumps(record, indent=2))
    print(f"written to {out / 'recheck.json'}")
    return record


if __name__ == "__main__":
    main()
