"""The echo environment: echoes each message back, rewarding its length.

It is an `MCPEnvironment`, so one class serves two views of the same thing:

- the Gym-style view: `reset()`, then `step(EchoAction(message=...))` returns an
  `EchoObservation` with `echoed_message`, `message_length` and `reward = 0.1 * len(message)`;
- the MCP view: tools `echo_message(message)` and `echo_with_length(message)`, listed and called
  over the server's `/mcp` endpoint (what an MCP-speaking agent or `EchoMCPEnv` uses), and over
  `/ws` as steps `{"type": "call_tool", "tool_name": ..., "arguments": {...}}` / `{"type":
  "list_tools"}`: what upstream OpenEnv's MCP-only echo_env takes, so upstream's client
  (`MCPToolClient`) works here too. A tool call that echoes a message carries the same reward as
  the plain step (upstream's server gives tool calls no reward).
"""

from __future__ import annotations

import uuid
from typing import Any, Optional

from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction
from openenv.core.env_server.types import Action, Observation, State

from ..models import MAX_MESSAGE_CHARS, REWARD_PER_CHARACTER, EchoAction, EchoObservation, length_reward  # noqa: F401
from .wire_guard import quote

READY_MESSAGE = "Echo environment ready!"


def checked_message(message: str) -> str:
    """`message`, or a ToolError when it is over MAX_MESSAGE_CHARS: the tools enforce the limit
    themselves, so `/mcp` (HTTP and WebSocket) refuses what a `/ws` step refuses."""
    if len(message) > MAX_MESSAGE_CHARS:
        raise ToolError(f"message should have at most {MAX_MESSAGE_CHARS:,} characters, got {quote(message)}.")
    return message


class EchoEnvironment(MCPEnvironment):
    """Echoes messages. Each WebSocket (or MCP) session gets its own instance."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("echo_env")

        @mcp.tool
        def echo_message(message: str) -> str:
            """Echo a message back unchanged.

            Args:
                message: The message to echo.
            """
            return checked_message(message)

        @mcp.tool
        def echo_with_length(message: str) -> dict:
            """Echo a message back together with its length in characters.

            Args:
                message: The message to echo.
            """
            return {"message": checked_message(message), "length": len(message)}

        super().__init__(mcp)
        self._state = State(episode_id=str(uuid.uuid4()), step_count=0)

    def reset(
        self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any
    ) -> EchoObservation:
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        return EchoObservation(echoed_message=READY_MESSAGE, message_length=0, reward=0.0)

    @staticmethod
    def _as_mcp(action: Any) -> Any:
        """Our EchoAction in its MCP form -> OpenEnv's ListToolsAction / CallToolAction."""
        if isinstance(action, EchoAction) and action.type == "list_tools":
            return ListToolsAction()
        if isinstance(action, EchoAction) and action.type == "call_tool":
            return CallToolAction(tool_name=action.tool_name, arguments=dict(action.arguments))
        return action

    @staticmethod
    def _rewarded(action: Any, observation: Observation) -> Observation:
        message = action.arguments.get("message") if isinstance(action, CallToolAction) else None
        if isinstance(message, str) and getattr(observation, "error", None) is None:
            observation.reward = length_reward(message)
        return observation

    def step(self, action: Action, timeout_s: Optional[float] = None, **kwargs: Any) -> Observation:
        action = self._as_mcp(action)
        if isinstance(action, (CallToolAction, ListToolsAction)):
            self._state.step_count += 1
        return self._rewarded(action, super().step(action, timeout_s=timeout_s, **kwargs))

    async def step_async(self, action: Action, timeout_s: Optional[float] = None,
                         **kwargs: Any) -> Observation:
        action = self._as_mcp(action)
        if isinstance(action, (CallToolAction, ListToolsAction)):
            self._state.step_count += 1
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        return self._rewarded(action, observation)

    def _step_impl(
        self, action: Any, timeout_s: Optional[float] = None, **kwargs: Any
    ) -> EchoObservation:
        if not isinstance(action, EchoAction):
            raise ValueError(f"Expected EchoAction(message=...), got {type(action).__name__}.")
        self._state.step_count += 1
        return EchoObservation(
            echoed_message=action.message,
            message_length=len(action.message),
            reward=length_reward(action.message),
            done=False,
        )

    @property
    def state(self) -> State:
        return self._state


__all__ = ["EchoEnvironment", "length_reward", "READY_MESSAGE"]
