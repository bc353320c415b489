"""Shared fixtures: one fork server per test worker, a local reasoning_gym server, and a papermill runner for notebooks.

Models are built once into the normal cache ($AGENT_RL_CACHE, default ~/.cache/agent-rl-notebooks),
so only the first test run pays for them.
"""

from __future__ import annotations

import os
from pathlib import Path

# Before torch loads (here and in every kernel/server the tests start): idle OpenMP threads sleep
# instead of spinning, which on a 2-core machine made notebook runs up to 5x slower.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402

from helpers.runs import load_metrics  # noqa: E402
from tools.notebooks import NOTEBOOKS_DIR, run_notebook  # noqa: E402
from helpers.servers import LocalServer  # noqa: E402
from helpers.servers import forkserver  # noqa: E402
from token_scan import real_token_values, token_like  # noqa: E402

TESTS_DIR = Path(__file__).resolve().parent


def assert_no_secret(executed: Path) -> None:
    """An executed notebook holds nothing token-shaped and no value of a token variable set here."""
    text = executed.read_text(errors="replace")
    assert not token_like(text), f"{executed} contains {token_like(text)}"
    assert not any(v in text for v in real_token_values()), f"{executed} contains the value of a token variable"


@pytest.fixture(scope="session", autouse=True)
def one_fork_server_per_worker():
    """Started first, so every server this test process, its notebook kernels and its launched processes start forks
    from one parent that imported openenv once (helpers/servers/forkserver.py), not from one per kernel."""
    if forkserver.FORKS and not forkserver.turned_off():
        forkserver.ensure_running()
    yield


@pytest.fixture(scope="session")
def rg_server(tmp_path_factory):
    """One reasoning_gym_env server for the session, with room for the concurrency tests."""
    with LocalServer("reasoning_gym_env.server.app:app", env={"MAX_CONCURRENT_ENVS": "32"},
                     name="reasoning_gym", log_dir=tmp_path_factory.mktemp("logs")) as server:
        yield server


@pytest.fixture
def notebook_runner(tmp_path, monkeypatch):
    """Run a notebook with PROFILE='tiny' (plus overrides) in a fresh runs folder.

    Returns (metrics, executed_notebook_path). Each test gets its own AGENT_RL_RUNS, so
    notebooks never see each other's checkpoints unless a test arranges it.
    """
    def run(name: str, runs_dir: Path | None = None, **parameters):
        runs = runs_dir or tmp_path / "runs"
        monkeypatch.setenv("AGENT_RL_RUNS", str(runs))  # inherited by the kernel
        monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))  # parallel workers: one database each
        source = NOTEBOOKS_DIR / f"{name}.ipynb"
        if not source.exists():
            source = TESTS_DIR / "notebooks" / f"{name}.ipynb"
        executed = tmp_path / f"{name}.executed.ipynb"
        try:
            run_notebook(source, executed, {"PROFILE": "tiny", **parameters}, cwd=tmp_path)
        finally:  # a notebook that failed is scanned too: error messages must not leak tokens either
            if executed.exists():
                assert_no_secret(executed)
        keep = os.environ.get("AGENT_RL_KEEP_EXECUTED")  # CI uploads these for reviewers
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            (Path(keep) / executed.name).write_bytes(executed.read_bytes())
        return load_metrics(name), executed

    return run


def pytest_collection_modifyitems(items):
    """Tests that execute a notebook are marked `notebook` (`make test-fast` skips them)."""
    for item in items:
        if "notebook_runner" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.notebook)
