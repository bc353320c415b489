"""Typed action and observation of the echo environment (Pydantic models, as OpenEnv wants).

`EchoAction` takes two shapes, so one server speaks both dialects of the echo environment:

- ours (and the seed tutorial's): ``{"message": "Hello"}``;
- upstream OpenEnv's MCP one (its echo_env is MCP-only since 2025): ``{"type": "call_tool",
  "tool_name": "echo_message", "arguments": {"message": "Hello"}}`` or ``{"type": "list_tools"}``,
  exactly the frames `openenv.core.mcp_client.MCPToolClient` (upstream's `EchoEnv`) sends.

A message longer than `MAX_MESSAGE_CHARS` is refused (VALIDATION_ERROR naming the limit).
"""

from __future__ import annotations

from typing import Any, Dict, Literal, Optional

from openenv.core.env_server.types import Action, Observation
from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

REWARD_PER_CHARACTER = 0.1


def length_reward(message: str) -> float:
    """The echo reward: 0.1 per character (the classic echo rule; longer messages earn more)."""
    return round(REWARD_PER_CHARACTER * len(message), 6)


#: Longest message a server echoes (a reply carries it back: megabytes would be amplified).
MAX_MESSAGE_CHARS = 100_000


class EchoAction(Action):
    """What the agent sends: a message to echo (or an MCP tool call / tool listing)."""

    message: Optional[str] = Field(default=None, max_length=MAX_MESSAGE_CHARS,
                                   description="The message to echo back.")
    type: Optional[Literal["call_tool", "list_tools"]] = Field(
        default=None, description="MCP form (upstream's echo_env): 'call_tool' or 'list_tools'.")
    tool_name: Optional[str] = Field(default=None, description="MCP form: the tool to call.")
    arguments: Dict[str, Any] = Field(default_factory=dict, description="MCP form: its arguments.")

    @model_validator(mode="after")
    def _one_shape(self) -> "EchoAction":
        if self.type is None and self.message is None:
            # PydanticCustomError, not ValueError: OpenEnv sends e.errors() as JSON, and a
            # ValueError in its ctx cannot be serialised (the session would close).
            raise PydanticCustomError("echo_action", 'send {"message": "..."} (or the MCP form {"type": '
                                      '"call_tool", "tool_name": "echo_message", "arguments": {"message": "..."}})')
        if self.type == "call_tool" and not self.tool_name:
            raise PydanticCustomError("echo_action", '{"type": "call_tool"} needs "tool_name", e.g. "echo_message"')
        message = self.arguments.get("message")
        if isinstance(message, str) and len(message) > MAX_MESSAGE_CHARS:
            raise PydanticCustomError("echo_action", f"arguments.message should have at most {MAX_MESSAGE_CHARS} characters")
        return self


class EchoObservation(Observation):
    """What the agent gets back. `reward` and `done` come from OpenEnv's `Observation`."""

    echoed_message: str = Field(default="", description="The message, echoed back unchanged.")
    message_length: int = Field(default=0, ge=0, description="len(message), in characters.")


__all__ = ["EchoAction", "EchoObservation", "MAX_MESSAGE_CHARS", "REWARD_PER_CHARACTER", "length_reward"]
