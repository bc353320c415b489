"""Token-shaped text: the scanner the secrets tests and every notebook run of the suite use."""

from __future__ import annotations

import os
import re

TOKEN_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY",
              "OPENREWARD_API_KEY", "TRACKIO_TOKEN", "GITHUB_TOKEN")
TOKEN_PATTERNS = [
    re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,}"),  # Hugging Face
    re.compile(r"(?<![A-Za-z0-9])sk-(?:proj-|ant-[a-z0-9]+-)?[A-Za-z0-9_\-]{20,}"),  # OpenAI / Anthropic
    re.compile(r"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{36}"),  # GitHub
    re.compile(r"(?<![A-Z0-9])AKIA[0-9A-Z]{16}(?![A-Z0-9])"),  # AWS access key id
    # a trackio dashboard URL's write token (secrets.token_urlsafe(32): 43 characters); it lets anyone who can
    # reach the dashboard write, rename and delete runs
    re.compile(r"(?<![A-Za-z0-9_])write_token=[A-Za-z0-9_\-]{20,}"),
]
# Placeholders that are fine to show (not secrets): the local ORS server's stand-in key.
ALLOWED = {"local-no-key-needed"}


def token_like(text: str) -> list[str]:
    return [m.group(0) for p in TOKEN_PATTERNS for m in p.finditer(text) if m.group(0) not in ALLOWED]


def real_token_values() -> list[str]:
    """Values of token variables really set here (e.g. CI secrets); short ones are not tokens."""
    return [v for v in (os.environ.get(name, "") for name in TOKEN_VARS) if len(v) >= 12 and v not in ALLOWED]
