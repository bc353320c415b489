"""Typed wire models of the reasoning_gym environment.

They follow the upstream OpenEnv `reasoning_gym_env` (the one the seed tutorials install from a
Space), so code written against it runs unchanged here:

- `ReasoningGymAction(answer: str)`: the agent's answer to the current question. Numbers are
  accepted and turned into strings (a model often emits `7` rather than `"7"` in a tool call).
- `ReasoningGymObservation`: `question`, `score`, `correct_answer`, `dataset_metadata`, plus
  `done` / `reward` from the OpenEnv base class. Every field but `done` may be null, as upstream
  (upstream sends `question: null` after a step; ours repeats the question). `error` is our
  addition, optional both ways (None unless the step could not be scored, e.g. a step before any
  reset or after the episode ended). The reward after reset is 0.0, as upstream.
- An answer longer than `MAX_ANSWER_CHARS` is refused (VALIDATION_ERROR naming the limit).
- `ReasoningGymState`: what `client.state()` returns: the dataset spec being served and the index
  of the current question.

Upstream OpenEnv's server (openenv-core at 685de411, what hosted Spaces run) strips
`Observation.metadata` from the wire (openenv 0.10.0, pinned here, keeps it), so everything a client
needs travels as typed fields, which every server carries.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field, field_validator


#: Longest answer a server takes: reasoning_gym answers are short; megabytes are an attack.
MAX_ANSWER_CHARS = 10_000


class ReasoningGymAction(Action):
    """The answer to the current question (one action ends the episode)."""

    answer: str = Field(..., max_length=MAX_ANSWER_CHARS, description="The agent's final answer, as text.")

    @field_validator("answer", mode="before")
    @classmethod
    def _numbers_as_text(cls, value: Any) -> Any:
        # bool is an int subclass, but True is never a sensible answer: let it fail validation.
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        return value


class ReasoningGymObservation(Observation):
    """A question (after reset) or its grading (after step)."""

    question: Optional[str] = Field(
        default=None, description="The current question (upstream sends null after a step)."
    )
    score: Optional[float] = Field(
        default=None, description="Score of the submitted answer in [0, 1]; None before a step."
    )
    correct_answer: Optional[str] = Field(
        default=None, description="The reference answer, revealed by step (None after reset)."
    )
    dataset_metadata: Optional[Dict[str, Any]] = Field(
        default=None,
        description="reasoning_gym's metadata of the question, revealed by step with the answer.",
    )
    error: Optional[str] = Field(
        default=None, description="Why the step could not be scored (None when all went well)."
    )


class ReasoningGymState(State):
    """Server-side state of one session (`episode_id`, `step_count` come from the base)."""

    dataset_name: Optional[str] = Field(default=None, description="reasoning_gym dataset name.")
    dataset_config: Dict[str, Any] = Field(default_factory=dict, description="Its config.")
    dataset_specs: Optional[List[Dict[str, Any]]] = Field(
        default=None, description="The parts of a 'composite' dataset (name, weight, config)."
    )
    seed: Optional[int] = Field(default=None, description="Dataset seed.")
    size: Optional[int] = Field(default=None, description="Dataset size (questions per cycle).")
    question_index: Optional[int] = Field(
        default=None, description="Index of the current question in the dataset."
    )
    done: bool = Field(default=False, description="Whether the current question was answered.")


__all__ = ["MAX_ANSWER_CHARS", "ReasoningGymAction", "ReasoningGymObservation", "ReasoningGymState"]
