"""Server side of reasoning_gym_env (the ASGI app lives in `reasoning_gym_env.server.app`)."""

from .environment import DEFAULT_DATASET, ReasoningGymEnvironment

__all__ = ["DEFAULT_DATASET", "ReasoningGymEnvironment"]
