"""The notebook harness itself: papermill runs a notebook against the real local server, the
notebook records what the environment computed, and nbval pins the output of marked cells.

The same run is the secrets check of tests/test_reliability_secrets.py: it runs with fake tokens in the
environment, and neither their values nor anything token-shaped may reach the executed notebook or the run folder."""

import random
import string
import subprocess
import sys

from token_scan import TOKEN_VARS, token_like
from tools.notebooks import cell_outputs_text


def test_smoke_notebook_records_env_rewards_and_nbval_reproduces_them(notebook_runner, monkeypatch, tmp_path):
    fakes = {name: "hf_" + "".join(random.choices(string.ascii_letters, k=34)) if name.startswith("H")
             else "sk-" + "".join(random.choices(string.ascii_letters + string.digits, k=40))
             for name in TOKEN_VARS if name != "GITHUB_TOKEN"}
    for name, value in fakes.items():
        monkeypatch.setenv(name, value)
    runs = tmp_path / "secret-runs"
    metrics, executed = notebook_runner("harness_smoke", runs_dir=runs)
    assert metrics["profile"] == "tiny"
    assert metrics["episodes"] == 3
    # right answers on even episodes, garbage on odd ones: the env scored them, not the notebook
    assert metrics["rewards"] == [1.0, 0.0, 1.0]
    assert "PROFILE = 'tiny' (given)" in cell_outputs_text(executed)

    for path in [executed] + [p for p in runs.rglob("*") if p.is_file()]:   # the fake tokens went nowhere
        text = path.read_text(errors="replace")
        leaked = [name for name, value in fakes.items() if value in text]
        assert not leaked, f"{path} contains the value of {leaked}"
        assert not token_like(text), f"{path} contains {token_like(text)}"

    # nbval --nbval-lax re-executes the papermill output and compares the # NBVAL_CHECK_OUTPUT cells
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "--nbval-lax", "-p", "no:cacheprovider",
                          str(executed)], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
