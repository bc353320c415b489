"""The notebook harness itself: papermill runs a notebook against the real local server, the
notebook records what the environment computed, and nbval pins the output of marked cells."""

import subprocess
import sys

from tools.notebooks import cell_outputs_text


def test_smoke_notebook_records_env_rewards_and_nbval_reproduces_them(notebook_runner, tmp_path):
    metrics, executed = notebook_runner("harness_smoke")
    assert metrics["profile"] == "tiny"
    assert metrics["episodes"] == 3
    # right answers on even episodes, garbage on odd ones: the env scored them, not the notebook
    assert metrics["rewards"] == [1.0, 0.0, 1.0]
    assert "PROFILE = 'tiny' (given)" in cell_outputs_text(executed)

    # nbval --nbval-lax re-executes the papermill output and compares the # NBVAL_CHECK_OUTPUT cells
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "--nbval-lax", "-p", "no:cacheprovider",
                          str(executed)], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
