"""The echo environment: echoes each message back, rewarding its length.

It is an `MCPEnvironment`, so one class serves two views of the same thing:

- the Gym-style view: `reset()`, then `step(EchoAction(message=...))` returns an
  `EchoObservation` with `echoed_message`, `message_length` and `reward = 0.1 * len(message)`;
- the MCP view: tools `echo_message(message)` and `echo_with_length(message)`, listed and called
  over the server's `/mcp` endpoint (what an MCP-speaking agent or `EchoMCPEnv` uses).
"""

from __future__ import annotations

import uuid
from typing import Any, Optional

from fastmcp import FastMCP
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.types import State

from ..models import EchoAction, EchoObservation

READY_MESSAGE = "Echo environment ready!"
REWARD_PER_CHARACTER = 0.1


def length_reward(message: str) -> float:
    """The echo reward: 0.1 per character (upstream's rule; longer messages earn more)."""
    return round(REWARD_PER_CHARACTER * len(message), 6)


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
            return message

        @mcp.tool
        def echo_with_length(message: str) -> dict:
            """Echo a message back together with its length in characters.

            Args:
                message: The message to echo.
            """
            return {"message": message, "length": len(message)}

        super().__init__(mcp)
        self._state = State(episode_id=str(uuid.uuid4()), step_count=0)

    def reset(
        self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any
    ) -> EchoObservation:
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        return EchoObservation(echoed_message=READY_MESSAGE, message_length=0, reward=0.0)

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
