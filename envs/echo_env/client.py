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

`EchoEnv` speaks to our server and to upstream OpenEnv's MCP-only echo_env (the hosted Space) alike:
a step goes out as the MCP tool call `echo_message(message)`, which both accept, and the reply is
read in either shape (ours: `echoed_message`; upstream's: `tool_name` + `result`). Upstream's
server gives a tool call no reward; when the server sends none, the client applies the echo rule
itself (0.1 per character, `length_reward`), so a rollout scores the same against either server.
"""

from __future__ import annotations

from typing import Any, Dict

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.types import State
from openenv.core.mcp_client import MCPToolClient

from .models import EchoAction, EchoObservation, length_reward


class EchoEnv(EnvClient[EchoAction, EchoObservation, State]):
    """One WebSocket session (`/ws`) on an echo server: reset, step, state."""

    def _step_payload(self, action: EchoAction) -> Dict[str, Any]:
        if isinstance(action, dict):  # forgiving: env.step({"message": "hi"})
            action = EchoAction.model_validate(action)
        if action.type is not None:  # already the MCP form
            return action.model_dump(include={"type", "tool_name", "arguments"}, exclude_none=True)
        return {"type": "call_tool", "tool_name": "echo_message", "arguments": {"message": action.message}}

    def _parse_result(self, payload: Dict[str, Any]) -> StepResult[EchoObservation]:
        obs = payload.get("observation") or {}
        reward = payload.get("reward")
        if "tool_name" in obs:  # a tool call's reply (either server)
            if obs.get("error"):
                error = obs["error"]
                raise RuntimeError(f"echo server at {self._base_url}: tool {obs['tool_name']!r} failed: "
                                   f"{error.get('message', error) if isinstance(error, dict) else error}")
            echoed = _tool_data(obs.get("result"))
            if isinstance(echoed, dict):  # echo_with_length
                echoed = echoed.get("message", "")
            echoed = "" if echoed is None else str(echoed)
            if reward is None:  # upstream's server: no reward for tool calls; the echo rule, here
                reward = length_reward(echoed)
        elif "echoed_message" in obs:  # our plain step / reset
            echoed = obs["echoed_message"]
        else:  # upstream's reset: a bare Observation, its greeting in metadata
            echoed = str((obs.get("metadata") or payload.get("metadata") or {}).get("message", ""))
        observation = EchoObservation(
            echoed_message=echoed,
            message_length=len(echoed),
            done=bool(payload.get("done", False)),
            reward=reward,
        )
        return StepResult(
            observation=observation,
            reward=reward,
            done=bool(payload.get("done", False)),
            metadata=payload.get("metadata"),
        )

    def _parse_state(self, payload: Dict[str, Any]) -> State:
        return State.model_validate(payload or {})


def _tool_data(result: Any) -> Any:
    """The value of an MCP tool result as OpenEnv serialises it (FastMCP's CallToolResult)."""
    if isinstance(result, dict):
        if "data" in result and result["data"] is not None:
            return result["data"]
        structured = result.get("structured_content") or result.get("structuredContent")
        if isinstance(structured, dict) and "result" in structured:
            return structured["result"]
        texts = [c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict)]
        if texts:
            return "".join(texts)
    return result


class EchoMCPEnv(MCPToolClient):
    """The echo server through MCP: `list_tools()` and `call_tool(name, **arguments)`.

    OpenEnv's `MCPToolClient` speaks JSON-RPC to the server's `/mcp` endpoint ("production mode":
    direct tool access, no rewards), inside one server-side session it opens for this client.
    """


__all__ = ["EchoEnv", "EchoMCPEnv"]
