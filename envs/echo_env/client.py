"""Clients of the echo environment: typed (`EchoEnv`) and MCP (`EchoMCPEnv`).

    async with EchoEnv(base_url="http://127.0.0.1:8000") as env:      # async, the default
        result = await env.reset()
        result = await env.step(EchoAction(message="Hello"))
        result.observation.echoed_message, result.reward               # 'Hello', 0.5

    with EchoEnv(base_url=...).sync() as env:                         # blocking; works in Jupyter
        env.reset(); env.step(EchoAction(message="Hello"))

    async with EchoMCPEnv(base_url=...) as env:                       # the MCP view of the server
        [t.name for t in await env.list_tools()]                      # ['echo_message', 'echo_with_length']
        await env.call_tool("echo_with_length", message="Hi")        # {'message': 'Hi', 'length': 2}
"""

from __future__ import annotations

from typing import Any, Dict

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.types import State
from openenv.core.mcp_client import MCPToolClient

from .models import EchoAction, EchoObservation


class EchoEnv(EnvClient[EchoAction, EchoObservation, State]):
    """One WebSocket session (`/ws`) on an echo server: reset, step, state."""

    def _step_payload(self, action: EchoAction) -> Dict[str, Any]:
        if isinstance(action, dict):  # forgiving: env.step({"message": "hi"})
            action = EchoAction.model_validate(action)
        return {"message": action.message}

    def _parse_result(self, payload: Dict[str, Any]) -> StepResult[EchoObservation]:
        obs = payload.get("observation") or {}
        observation = EchoObservation(
            echoed_message=obs.get("echoed_message", ""),
            message_length=obs.get("message_length", 0),
            done=bool(payload.get("done", False)),
            reward=payload.get("reward"),
        )
        return StepResult(
            observation=observation,
            reward=payload.get("reward"),
            done=bool(payload.get("done", False)),
            metadata=payload.get("metadata"),
        )

    def _parse_state(self, payload: Dict[str, Any]) -> State:
        return State.model_validate(payload or {})


class EchoMCPEnv(MCPToolClient):
    """The echo server through MCP: `list_tools()` and `call_tool(name, **arguments)`.

    OpenEnv's `MCPToolClient` speaks JSON-RPC to the server's `/mcp` endpoint ("production mode":
    direct tool access, no rewards), inside one server-side session it opens for this client.
    """


__all__ = ["EchoEnv", "EchoMCPEnv"]
