"""Typed client of the code feedback environment (async; `.sync()` for blocking use).

    with CodeFeedbackEnv(base_url="http://127.0.0.1:8000").sync() as env:
        env.reset(task="add")
        result = env.step(CodeAction(code="def add(a, b):\\n    return a + b"))
        result.observation.status, result.observation.tests_passed, result.reward   # 'ok', 3, 1.0
"""

from __future__ import annotations

from typing import Any, Dict

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.types import State

from .models import CodeAction, CodeObservation


class CodeFeedbackEnv(EnvClient[CodeAction, CodeObservation, State]):
    """One WebSocket session (`/ws`) on a code feedback server."""

    def _step_payload(self, action: CodeAction) -> Dict[str, Any]:
        if isinstance(action, dict):
            action = CodeAction.model_validate(action)
        return {"code": action.code, "function_name": action.function_name}

    def _parse_result(self, payload: Dict[str, Any]) -> StepResult[CodeObservation]:
        obs = dict(payload.get("observation") or {})
        for key in ("done", "reward", "metadata"):
            obs.pop(key, None)
        observation = CodeObservation(
            **obs, done=bool(payload.get("done", False)), reward=payload.get("reward"))
        return StepResult(
            observation=observation,
            reward=payload.get("reward"),
            done=bool(payload.get("done", False)),
            metadata=payload.get("metadata"),
        )

    def _parse_state(self, payload: Dict[str, Any]) -> State:
        return State.model_validate(payload or {})


__all__ = ["CodeFeedbackEnv"]
