"""Server side of the TextArena environment: `TextArenaEnvironment` and the ASGI `app`."""

from .environment import TextArenaEnvironment

__all__ = ["TextArenaEnvironment"]
