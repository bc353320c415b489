"""`make install` on a Python older than the pins allow stops at once, naming the version and what to do.

numpy 2.4.6, trl 1.16, transformers 5.24, fastapi and websockets need Python 3.11; on 3.10 pip's resolver
failed after minutes with a message about numpy. The Makefile checks the interpreter first. An old
interpreter is simulated: a wrapper around this Python that reports 3.10.12 as `sys.version_info`
to the check's `-c` code (what a real 3.10 would report), so the test needs no second Python.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

OLD_PYTHON = f"""#!{sys.executable}
import sys
if sys.argv[1:2] != ["-c"]:
    sys.exit("this stand-in for Python 3.10 only runs -c code")
sys.version_info = (3, 10, 12, "final", 0)
exec(sys.argv[2])
"""


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_install_on_python_3_10_stops_before_creating_anything(tmp_path):
    old = tmp_path / "python3.10"
    old.write_text(OLD_PYTHON)
    old.chmod(0o755)
    venv = tmp_path / "venv"
    result = subprocess.run(["make", "-s", "install", f"PYTHON={old}", f"VENV={venv}"], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=60, env={**os.environ, "MAKEFLAGS": ""})
    assert result.returncode != 0
    message = result.stderr
    assert "is Python 3.10; this project needs Python 3.11 or newer" in message, message
    assert "make install PYTHON=python3.12" in message
    assert not venv.exists()  # nothing was created: no half-built venv to clean up
