"""Typed action and observation of the code feedback environment."""

from __future__ import annotations

from typing import Dict, Optional

from openenv.core.env_server.types import Action, Observation
from pydantic import Field


class CodeAction(Action):
    """A submission: Python source, and the function it should define."""

    code: str = Field(description="Python source code to run.")
    function_name: str = Field(
        default="",
        description="Function the code must define ('' = the task's function; in free mode, no check).",
    )


class CodeObservation(Observation):
    """What happened to a submission. `reward` and `done` come from OpenEnv's `Observation`."""

    status: str = Field(
        description="ok | error | timeout | memory_limit | output_limit (ok on reset).")
    output: Optional[str] = Field(default=None, description="Captured stdout (capped), or feedback.")
    error: Optional[str] = Field(default=None, description="Captured stderr / traceback (capped).")
    execution_time_ms: Optional[float] = Field(default=None, description="Wall time of the run.")
    limit: Optional[str] = Field(default=None, description="The limit that stopped the run, if any.")
    task: Optional[str] = Field(default=None, description="The task prompt (task mode).")
    function_name: Optional[str] = Field(default=None, description="Function the task asks for.")
    tests_passed: Optional[int] = Field(default=None, description="Tests passed (task mode).")
    tests_total: Optional[int] = Field(default=None, description="Tests run (task mode).")
    sandbox: Dict[str, str] = Field(
        default_factory=dict, description="Which mechanism enforced each isolation layer.")


__all__ = ["CodeAction", "CodeObservation"]
