"""Re-score a trained model against its start on more held-out questions: is the change more than noise?

Notebook 01 scores 150 held-out sums before and after GRPO. Its `cpu` run gains about 4 points, and the paired
95 % interval on 150 questions is about +-8 points wide, so one notebook run cannot tell that gain from noise;
the interval narrows with the square root of the number of questions. This scores both models on the same
`n` questions (the first 150 are the notebook's own, in the same order) and prints the paired change:

    python -m helpers.recheck runs/02_sft_warmup/checkpoint runs/01_grpo_walkthrough/model --n 900

Greedy replies like the notebook's evaluation; on 2 AVX2 CPU cores (a Zen 3 EPYC) SmolLM2-135M takes ~1 s a
question per model (900 questions: ~30 min in all). The result is written to runs/recheck/recheck.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from helpers.evaluation import evaluate_policy, paired_change
from helpers.models import load_policy
from helpers.profiles import resolve_settings
from helpers.prompts import system_prompt_for

NB = "01_grpo_walkthrough"


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
    from helpers.metrics import run_dir
    from helpers.servers import server_or_url

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", help="the start model's folder (notebook 02's checkpoint)")
    parser.add_argument("after", help="the trained model's folder (notebook 01 saves it as runs/01_grpo_walkthrough/model)")
    parser.add_argument("--n", type=int, default=900, help="held-out questions (default 900)")
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
    out = run_dir("recheck")
    url, server = server_or_url(args.env_base_url, "reasoning_gym_env.server.app:app", name="reasoning_gym",
                                log_dir=out / "logs")
    try:
        record = recheck(args.before, args.after, url, n=args.n, dataset_name=settings.dataset_name,
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
