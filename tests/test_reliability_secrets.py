"""No secret is ever printed or written into a notebook.

Tokens are read from the environment (or a prompt), never typed into a cell, and never echoed.
Three checks:
- every committed notebook (notebooks/, colab/, tests/notebooks/) is free of token-looking text;
- the smoke notebook executed with fake tokens in HF_TOKEN / OPENAI_API_KEY / ... leaves neither
  the fake values nor anything token-shaped in the executed notebook or the run folder;
- every notebook executed earlier in this test session (their tmp folders, and
  $AGENT_RL_KEEP_EXECUTED, which CI uploads) is free of token-looking text and of the values of
  any real token variables set in this environment.
"""

from __future__ import annotations

import os
import random
import re
import string
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
TOKEN_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY",
              "OPENREWARD_API_KEY", "TRACKIO_TOKEN", "GITHUB_TOKEN")
TOKEN_PATTERNS = [
    re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}"),  # Hugging Face
    re.compile(r"(?<![A-Za-z0-9])sk-(?:proj-|ant-[a-z0-9]+-)?[A-Za-z0-9_\-]{20,}"),  # OpenAI / Anthropic
    re.compile(r"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{36}"),  # GitHub
    re.compile(r"(?<![A-Z0-9])AKIA[0-9A-Z]{16}(?![A-Z0-9])"),  # AWS access key id
]
# Placeholders that are fine to show (not secrets): the local ORS server's stand-in key.
ALLOWED = {"local-no-key-needed"}


def token_like(text: str) -> list[str]:
    return [m.group(0) for p in TOKEN_PATTERNS for m in p.finditer(text) if m.group(0) not in ALLOWED]


def real_token_values() -> list[str]:
    """Values of token variables really set here (e.g. CI secrets); short ones are not tokens."""
    return [v for v in (os.environ.get(name, "") for name in TOKEN_VARS) if len(v) >= 12 and v not in ALLOWED]


def test_the_scanner_finds_tokens():
    fake_hf = "hf_" + "".join(random.choices(string.ascii_letters, k=34))
    assert token_like(f"login('{fake_hf}')") == [fake_hf]
    assert token_like('key = "sk-proj-abcdefghijklmnopqrstuvwx12"')
    assert token_like("ghp_" + "a" * 36)
    # ordinary text is not a token
    assert not token_like("task-free risk-averse hf_hub_download HF_TOKEN sk-learn local-no-key-needed")


def committed_notebooks() -> list[Path]:
    return sorted(p for folder in ("notebooks", "colab", "tests/notebooks")
                  for p in (REPO_ROOT / folder).glob("*.ipynb"))


def test_committed_notebooks_hold_no_token():
    paths = committed_notebooks()
    assert paths, "no notebooks found"
    found = {str(p.relative_to(REPO_ROOT)): token_like(p.read_text()) for p in paths}
    assert not any(found.values()), {k: v for k, v in found.items() if v}


def test_fake_tokens_in_the_environment_never_reach_the_notebook(notebook_runner, monkeypatch, tmp_path):
    fakes = {name: "hf_" + "".join(random.choices(string.ascii_letters, k=34)) if name.startswith("H")
             else "sk-" + "".join(random.choices(string.ascii_letters + string.digits, k=40))
             for name in TOKEN_VARS if name != "GITHUB_TOKEN"}
    for name, value in fakes.items():
        monkeypatch.setenv(name, value)
    runs = tmp_path / "secret-runs"
    metrics, executed = notebook_runner("harness_smoke", runs_dir=runs)
    assert metrics["episodes"] > 0  # it really ran, with the fake tokens in its environment
    written = [executed] + [p for p in runs.rglob("*") if p.is_file()]
    for path in written:
        text = path.read_text(errors="replace")
        leaked = [name for name, value in fakes.items() if value in text]
        assert not leaked, f"{path} contains the value of {leaked}"
        assert not token_like(text), f"{path} contains {token_like(text)}"


def session_executed_notebooks(tmp_path_factory) -> list[Path]:
    found = set(tmp_path_factory.getbasetemp().rglob("*.executed.ipynb"))
    keep = os.environ.get("AGENT_RL_KEEP_EXECUTED")
    if keep and Path(keep).is_dir():
        found |= set(Path(keep).glob("*.ipynb"))
    return sorted(found)


def test_notebooks_executed_in_this_session_hold_no_token(tmp_path_factory):
    paths = session_executed_notebooks(tmp_path_factory)
    if not paths:
        pytest.skip("no notebook was executed earlier in this session")
    values = real_token_values()
    for path in paths:
        text = path.read_text(errors="replace")
        assert not token_like(text), f"{path} contains {token_like(text)}"
        assert not any(v in text for v in values), f"{path} contains the value of a token variable"
