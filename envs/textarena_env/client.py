"""Client of the TextArena environment (async; `.sync()` for blocking use, also inside Jupyter).

    with TextArenaEnv(base_url="http://127.0.0.1:8001").sync() as env:
        result = env.reset(seed=7)                     # same seed, same secret word
        print(result.observation.prompt)
        result = env.step(TextArenaAction(message="[crane]"))
        print(result.observation.last_message)         # "You submitted [crane]. Feedback: ..."
        print(result.observation.feedback, result.reward, result.done)

Server errors (a step before reset, a bad word=, a session over the server's capacity) are
raised as ``RuntimeError("Server error: ...")``.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from .models import TextArenaAction, TextArenaMessage, TextArenaObservation, TextArenaState

_FIELDS = tuple(name for name in TextArenaObservation.model_fields if name not in ("reward", "done", "metadata"))


class TextArenaEnv(EnvClient[TextArenaAction, TextArenaObservation, TextArenaState]):
    """One WebSocket session on a TextArena environment server."""

    def reset(self, seed: Optional[int] = None, word: Optional[str] = None, **kwargs: Any) -> Any:
        """Start a game.

        Args:
            seed: picks the secret word deterministically (Wordle).
            word: the secret word itself (Wordle; five letters), e.g. for tests and demos.
        """
        if seed is not None:
            kwargs["seed"] = seed
        if word is not None:
            kwargs["word"] = word
        return super().reset(**kwargs)

    def _step_payload(self, action: TextArenaAction) -> Dict[str, Any]:
        return {"message": action.message}

    def _parse_result(self, payload: Dict[str, Any]) -> StepResult[TextArenaObservation]:
        data = payload.get("observation", {}) or {}
        fields = {k: data[k] for k in _FIELDS if k in data}
        fields["messages"] = [TextArenaMessage(**m) for m in data.get("messages", []) if isinstance(m, dict)]
        observation = TextArenaObservation(**fields, reward=payload.get("reward"), done=payload.get("done", False))
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: Dict[str, Any]) -> TextArenaState:
        return TextArenaState(**payload)
