"""Re-export only: model names -> folders moved to helpers/model_folders.py (the base layer, which compute uses).

The notebooks still import `resolve_model` and `trl_qwen3_chat_template` from here; this module goes once they import
from helpers.model_folders.
"""

from helpers.model_folders import resolve_model, trl_qwen3_chat_template  # noqa: F401
