"""TextArena games (Wordle-v0 by default) as an OpenEnv environment, offline.

The seeds' imports work unchanged:

    from textarena_env import TextArenaAction, TextArenaEnv

Serve it with `textarena_env.server.app:app` (helpers.servers.LocalServer starts it on
127.0.0.1); MAX_CONCURRENT_ENVS caps the sessions, TEXTARENA_ENV_ID picks the game.
"""

from .client import TextArenaEnv
from .models import TextArenaAction, TextArenaMessage, TextArenaObservation, TextArenaState

__all__ = ["TextArenaAction", "TextArenaEnv", "TextArenaMessage", "TextArenaObservation", "TextArenaState"]
