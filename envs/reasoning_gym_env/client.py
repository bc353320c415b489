"""Client of the reasoning_gym environment (async; `.sync()` for blocking use).

    async with ReasoningGymEnv(base_url="http://127.0.0.1:8000") as env:
        result = await env.reset(dataset_name="chain_sum",
                                 dataset_config={"min_terms": 2, "max_terms": 3},
                                 seed=0, size=1000)
        print(result.observation.question)
        result = await env.step(ReasoningGymAction(answer="86"))
        print(result.reward, result.observation.correct_answer)
        result = await env.reset()          # the next question of the same dataset

    env = ReasoningGymEnv(base_url=...).sync()   # same API, blocking; works inside Jupyter
    with env:
        env.reset(); env.step(ReasoningGymAction(answer="86"))

Errors from the server (unknown dataset, bad config, a session over the server's capacity) are
raised as ``RuntimeError("Server error: ... (code: ...)")``; validation errors name the field.

A server that is down, dies mid-episode or stops answering is a ``ConnectionError`` naming its URL,
raised within ``connect_timeout_s`` (10 s) / ``message_timeout_s`` (30 s), never a hang. Inside a
GRPOTrainer this matters: TRL hands a tool's exception back to the model as text (a dead server
would silently become zero rewards), but an exception from ``reset()`` stops training, and the
next ``reset()`` after a lost connection raises this error. The next call after the server comes
back reconnects by itself (as a new session: serve your dataset again).
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Optional

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from websockets.exceptions import ConnectionClosed

from .models import ReasoningGymAction, ReasoningGymObservation, ReasoningGymState

_OBSERVATION_FIELDS = ("question", "score", "correct_answer", "dataset_metadata", "error")


class ReasoningGymEnv(EnvClient[ReasoningGymAction, ReasoningGymObservation, ReasoningGymState]):
    """One WebSocket session on a reasoning_gym environment server."""

    def __init__(
        self,
        base_url: Optional[str] = None,
        connect_timeout_s: float = 10.0,
        message_timeout_s: float = 30.0,
        **kwargs: Any,
    ) -> None:
        # One question is scored in milliseconds: 30 s without an answer means the server is gone
        # or stuck, and saying so beats OpenEnv's 60 s default.
        super().__init__(
            base_url=base_url,
            connect_timeout_s=connect_timeout_s,
            message_timeout_s=message_timeout_s,
            **kwargs,
        )

    def _server_gone(self, what: str, exc: BaseException) -> ConnectionError:
        detail = str(exc) or type(exc).__name__
        return ConnectionError(
            f"reasoning_gym server at {self._base_url}: {what} ({detail}). Is the server still "
            f"running? Restart it (or fix ENV_BASE_URL) and run again."
        )

    async def _connect_async(self) -> "ReasoningGymEnv":
        try:
            return await super()._connect_async()
        except ConnectionError as exc:  # OpenEnv's "Failed to connect to ws://..."
            raise self._server_gone("cannot connect", exc.__cause__ or exc) from exc

    async def _send_and_receive(self, message: Dict[str, Any]) -> Dict[str, Any]:
        try:
            return await super()._send_and_receive(message)
        except ConnectionError:
            raise  # already names the server (from _connect_async)
        except ConnectionClosed as exc:
            # The socket is closed now, so the next call opens a fresh one (a restarted server).
            raise self._server_gone("connection lost", exc) from exc
        except asyncio.TimeoutError as exc:  # OpenEnv dropped the socket already
            raise self._server_gone(
                f"no answer within {self._message_timeout:g} s", exc
            ) from exc
        except OSError as exc:
            raise self._server_gone("connection failed", exc) from exc

    def reset(
        self,
        dataset_name: Optional[str] = None,
        dataset_config: Optional[Dict[str, Any]] = None,
        seed: Optional[int] = None,
        size: Optional[int] = None,
        dataset_specs: Optional[List[Dict[str, Any]]] = None,
        **kwargs: Any,
    ) -> Any:
        """Start an episode: build a dataset (any dataset argument given) or serve the next question.

        Args:
            dataset_name: a reasoning_gym dataset, e.g. "chain_sum".
            dataset_config: its config, e.g. {"min_terms": 2, "max_terms": 3}.
            seed: dataset seed (same seed, same questions).
            size: number of questions before the sequence wraps around.
            dataset_specs: with dataset_name="composite", the parts to mix, e.g.
                [{"name": "chain_sum", "weight": 2, "config": {...}}, {"name": "leg_counting"}].
            **kwargs: passed on (e.g. episode_id).

        Returns:
            (awaitable in async code) StepResult whose observation carries the question.
        """
        return self._dispatch(
            lambda: self._reset_async(
                dataset_name=dataset_name,
                dataset_config=dataset_config,
                seed=seed,
                size=size,
                dataset_specs=dataset_specs,
                **kwargs,
            )
        )

    async def _reset_async(self, **kwargs: Any) -> StepResult[ReasoningGymObservation]:
        # `.sync()` calls this directly; leaving out None means "not given" to the server.
        return await super()._reset_async(**{k: v for k, v in kwargs.items() if v is not None})

    def _step_payload(self, action: ReasoningGymAction) -> Dict[str, Any]:
        if isinstance(action, dict):  # be forgiving: env.step({"answer": "86"})
            action = ReasoningGymAction.model_validate(action)
        return {"answer": action.answer}

    def _parse_result(self, payload: Dict[str, Any]) -> StepResult[ReasoningGymObservation]:
        # Upstream servers send null for any field they have nothing for (`question` after a
        # step, `dataset_metadata` when empty) and no `error`: every field here is optional.
        obs_data = payload.get("observation") or {}
        observation = ReasoningGymObservation(
            **{k: obs_data[k] for k in _OBSERVATION_FIELDS if k in obs_data},
            done=bool(payload.get("done", False)),
            reward=payload.get("reward"),
        )
        return StepResult(
            observation=observation,
            reward=payload.get("reward"),
            done=bool(payload.get("done", False)),
            metadata=payload.get("metadata"),
        )

    def _parse_state(self, payload: Dict[str, Any]) -> ReasoningGymState:
        return ReasoningGymState.model_validate(payload or {})

    async def _receive(self) -> Dict[str, Any]:
        # OpenEnv's error frame for a malformed message says only "Invalid message"; the field
        # errors ride along in data["errors"]. Fold them into the message the client raises.
        response = await super()._receive()
        if response.get("type") == "error":
            data = response.get("data") or {}
            errors = data.get("errors")
            if errors and isinstance(data, dict):
                details = "; ".join(
                    f"{'.'.join(str(p) for p in e.get('loc', ())) or 'action'}: {e.get('msg', e)}"
                    if isinstance(e, dict) else str(e)
                    for e in errors
                )
                data["message"] = f"{data.get('message', 'Invalid message')} ({details})"
        return response


__all__ = ["ReasoningGymEnv"]
