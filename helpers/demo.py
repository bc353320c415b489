"""`make demo`: the main job offline on a laptop — SFT warm-up (02), then GRPO from it (01).

Both notebooks run with papermill under PROFILE=cpu (SmolLM2-135M, local servers, local teacher);
executed copies and metrics land in ./runs. Pass --profile tiny for a one-minute dry run.
"""

from __future__ import annotations

import argparse
import json
import time

from helpers.metrics import runs_dir
from helpers.notebooks import NOTEBOOKS_DIR, run_notebook

PIPELINE = ["02_sft_warmup", "01_grpo_walkthrough"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profile", default="cpu", choices=["tiny", "cpu", "gpu"])
    parser.add_argument("--notebooks", default=",".join(PIPELINE),
                        help=f"comma-separated, run in this order (default: {','.join(PIPELINE)})")
    args = parser.parse_args()
    out = runs_dir() / "executed"
    out.mkdir(parents=True, exist_ok=True)
    for name in args.notebooks.split(","):
        if not (NOTEBOOKS_DIR / f"{name}.ipynb").exists():
            parser.error(f"no notebook {name!r} in {NOTEBOOKS_DIR}")
        start = time.perf_counter()
        print(f"== {name} (PROFILE={args.profile}) ...", flush=True)
        run_notebook(NOTEBOOKS_DIR / f"{name}.ipynb", out / f"{name}.ipynb", {"PROFILE": args.profile},
                     timeout=None, log_output=True)  # training cells run for minutes: no per-cell limit
        metrics_path = runs_dir() / name / "metrics.json"
        metrics = json.loads(metrics_path.read_text()) if metrics_path.exists() else {}
        print(f"   done in {time.perf_counter() - start:.0f} s; executed notebook: {out / (name + '.ipynb')}")
        print("   metrics:", json.dumps({k: v for k, v in metrics.items() if not isinstance(v, (list, dict))},
                                        indent=None, default=str))


if __name__ == "__main__":
    main()
