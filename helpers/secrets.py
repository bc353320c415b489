"""Secrets (API keys, tokens) from the environment, or from Colab's secrets panel (the key icon).

    secret_to_env("OPENAI_API_KEY")   # True when set; a Colab secret is copied into os.environ

Copying into os.environ is what lets subprocesses (`openenv collect`) see a Colab secret: only the
notebook's own kernel can read `google.colab.userdata`. The value is never printed.
"""

from __future__ import annotations

import os


def colab_secret(name: str) -> str | None:
    """The Colab secret `name`, or None (not on Colab, no such secret, or access not granted)."""
    try:
        from google.colab import userdata
    except ImportError:
        return None
    try:
        return userdata.get(name) or None
    except Exception:  # SecretNotFoundError, NotebookAccessError, TimeoutException: all mean "not available"
        return None


def secret_to_env(name: str) -> bool:
    """True when `name` is in the environment, after copying it there from a Colab secret if needed."""
    if os.environ.get(name):
        return True
    value = colab_secret(name)
    if value:
        os.environ[name] = value
        return True
    return False
