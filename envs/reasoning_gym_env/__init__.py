"""reasoning_gym as an OpenEnv environment: one question per episode, scored by reasoning_gym.

Wire-compatible with the upstream OpenEnv `reasoning_gym_env` the seed tutorials install from a
Space, so `from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv` works unchanged
against a local server:

    python -m uvicorn reasoning_gym_env.server.app:app --port 8000     # the server
    ReasoningGymEnv(base_url="http://127.0.0.1:8000")                 # the client

`reasoning_gym_env.harness.ReasoningGymSessionFactory` is what `openenv collect
reasoning_gym:<dataset>` uses.
"""

from .client import ReasoningGymEnv
from .models import ReasoningGymAction, ReasoningGymObservation, ReasoningGymState

__all__ = [
    "ReasoningGymAction",
    "ReasoningGymEnv",
    "ReasoningGymObservation",
    "ReasoningGymState",
]
