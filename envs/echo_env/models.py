"""Typed action and observation of the echo environment (Pydantic models, as OpenEnv wants)."""

from __future__ import annotations

from openenv.core.env_server.types import Action, Observation
from pydantic import Field


class EchoAction(Action):
    """What the agent sends: a message to echo."""

    message: str = Field(description="The message to echo back.")


class EchoObservation(Observation):
    """What the agent gets back. `reward` and `done` come from OpenEnv's `Observation`."""

    echoed_message: str = Field(default="", description="The message, echoed back unchanged.")
    message_length: int = Field(default=0, ge=0, description="len(message), in characters.")


__all__ = ["EchoAction", "EchoObservation"]
