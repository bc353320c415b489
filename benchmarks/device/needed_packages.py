"""Print `name==version` for each installed distribution the notebooks import that the device image lacks.

    python benchmarks/device/needed_packages.py [--device-packages FILE] [--kit .gpu]

Each exported notebook (.gpu/<notebook>.py, from make_kit.sh) runs once with PROFILE=tiny while every Python
process it starts (the environment servers, `openenv collect`) records the top-level modules it imported;
those modules map to distributions. A distribution is left out when the device image has it (the names on the
"Packages:" line of FILE, the workplace's KINDS.md), except those whose version this project pins for a reason.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

KEEP_PINNED = {"transformers", "huggingface-hub", "tokenizers", "safetensors", "accelerate", "peft"}
NOTEBOOKS = ("01_grpo_walkthrough", "02_sft_warmup", "03_wordle_rollout_func", "04_openreward_spec")
TRACER = """import atexit, os, sys
def _dump():
    with open(os.environ["MODULE_TRACE"], "a") as f:
        f.write("\\n".join({m.split(".")[0] for m in list(sys.modules)}) + "\\n")
atexit.register(_dump)
"""


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.strip().lower())


def traced_modules(kit: Path) -> set[str]:
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "sitecustomize.py").write_text(TRACER)
        trace = Path(tmp, "modules.txt")
        for nb in NOTEBOOKS:
            env = {**os.environ, "PYTHONPATH": tmp, "MODULE_TRACE": str(trace), "AGENT_RL_RUNS": str(Path(tmp, nb)),
                   "OMP_WAIT_POLICY": "PASSIVE"}
            subprocess.run([sys.executable, str((kit / f"{nb}.py").resolve()), "--profile", "tiny", "--report-to", "none"],
                           env=env, check=True, stdout=subprocess.DEVNULL, cwd=tmp)
        return set(trace.read_text().split())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device-packages", default="/work/.library/device/KINDS.md")
    parser.add_argument("--kit", default=".gpu")
    args = parser.parse_args(argv)
    text = Path(args.device_packages).read_text() if Path(args.device_packages).exists() else ""
    line = next((l for l in text.splitlines() if l.startswith("Packages:") or "Packages: " in l), "")
    on_device = {norm(p) for p in line.split("Packages:", 1)[-1].rstrip(".").split(",") if p.strip()}
    by_module = md.packages_distributions()
    dists = {d for m in traced_modules(Path(args.kit)) for d in by_module.get(m, [])}
    for dist in sorted(dists, key=norm):
        name = norm(dist)
        if name in ("torch", "agent-rl-notebooks") or (name in on_device and name not in KEEP_PINNED):
            continue
        print(f"{dist}=={md.version(dist)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
