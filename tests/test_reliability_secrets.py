"""No secret is ever printed or written into a notebook.

Tokens are read from the environment (or a prompt), never typed into a cell, and never echoed.
Three checks:
- every committed notebook (notebooks/, colab/, tests/notebooks/) is free of token-looking text;
- the smoke notebook executed with fake tokens in HF_TOKEN / OPENAI_API_KEY / ... leaves neither
  the fake values nor anything token-shaped in the executed notebook or the run folder (checked in
  tests/test_harness_smoke.py, whose run of that notebook it is);
- every notebook any test executes is scanned right after it runs (tests/conftest.py's
  `notebook_runner`): no token-looking text, and none of the values of real token variables set in
  this environment (e.g. CI secrets).
"""

from __future__ import annotations

import random
import string
from pathlib import Path

from token_scan import token_like

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_the_scanner_finds_tokens():
    fake_hf = "hf_" + "".join(random.choices(string.ascii_letters, k=34))
    assert token_like(f"login('{fake_hf}')") == [fake_hf]
    assert token_like('key = "sk-proj-abcdefghijklmnopqrstuvwx12"')
    assert token_like("ghp_" + "a" * 36)
    assert token_like('<iframe src="http://127.0.0.1:7860/?project=p&write_token=' + "Ab-_9" * 9 + '">')
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
