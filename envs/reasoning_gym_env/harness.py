"""reasoning_gym sessions for OpenEnv's harness layer (what `openenv collect` drives).

`openenv collect reasoning_gym:chain_sum --base-url URL ...` builds

    ReasoningGymSessionFactory(lambda: ReasoningGymEnv(base_url=URL),
                               dataset_name="chain_sum", dataset_config=<--dataset-config>)

and, for every episode, `CollectRunner` does

    session = factory.create(task=None, episode_id="ep-000012")   # opens a session, resets
    session.initial_messages()      # [{"role": "user", "content": <question>}]
    session.list_tools()            # [Tool(name="answer", ...)]
    session.call_tool("answer", {"answer": "86"})   # ToolResult(done=True, metadata={"reward": 1.0})
    session.verify(transcript, final_state)          # VerifyResult(env_reward=1.0)
    session.close()

The episode's reward is the environment's score of the submitted answer (the harness never
computes a reward itself). Every episode gets a fresh question: each session builds a one-question
dataset whose seed is the `seed` passed to `create` (TRL passes the same seed to every rollout of a
group, so they share a question), else the factory's `seed` plus a running episode counter
(reproducible), else one derived from the episode id (what the CLI gets: it names its episodes
`ep-000000`, `ep-000001`, ..., so the same command collects the same questions every time and
`--resume` gives a missing id the question it would have had), else a random one. Consecutive seeds
walk the questions of one reasoning_gym dataset, since question `i` of a dataset with seed `s` is
built from `s + i`.

Mistakes of the model do not fail the episode: an unknown tool, a missing `answer` argument or a
second answer come back as a `ToolResult` with `error` set (the model sees the message and can
try again within `--max-turns`). An episode in which the model never answers has no reward, and
`openenv collect` counts it as failed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import threading
from typing import Any, Callable, Optional

from openenv.core.env_server.mcp_types import Tool
from openenv.core.harness import (
    ResourceSession,
    ResourceSessionFactory,
    ToolResult,
    VerifyResult,
)

from .client import ReasoningGymEnv
from .models import ReasoningGymAction

ANSWER_TOOL = Tool(
    name="answer",
    description="Submit the final answer for the current question. Call it exactly once.",
    input_schema={
        "type": "object",
        "properties": {
            "answer": {"type": "string", "description": "The final answer, as text."},
        },
        "required": ["answer"],
    },
)


def _error(message: str) -> ToolResult:
    return ToolResult(data={"error": message}, done=False, error=message)


class ReasoningGymSession(ResourceSession):
    """One episode on its own WebSocket session: one question, one `answer` tool."""

    def __init__(
        self,
        client: Any,
        *,
        dataset_name: str,
        dataset_config: Optional[dict[str, Any]] = None,
        seed: int,
        episode_id: Optional[str] = None,
        task: Any = None,
    ):
        # An async EnvClient is driven through its blocking wrapper (harnesses are synchronous).
        self._client = client.sync() if callable(getattr(client, "sync", None)) else client
        self._closed = False
        self.task = task
        self.seed = seed
        self.dataset_name = dataset_name
        self._last_result = None
        try:
            reset_kwargs: dict[str, Any] = {
                "dataset_name": dataset_name,
                "dataset_config": dict(dataset_config or {}),
                "seed": seed,
                "size": 1,
            }
            if episode_id is not None:
                reset_kwargs["episode_id"] = episode_id
            self._initial_result = self._client.reset(**reset_kwargs)
        except BaseException:
            self.close()
            raise

    @property
    def question(self) -> str:
        return self._initial_result.observation.question

    def initial_messages(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self.question}]

    def list_tools(self) -> list[Tool]:
        return [ANSWER_TOOL]

    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        if name != ANSWER_TOOL.name:
            return _error(f"Unknown tool {name!r}: the only tool is 'answer' (argument 'answer').")
        if self._last_result is not None:
            return _error("The question was already answered; the episode is over.")
        arguments = arguments if isinstance(arguments, dict) else {}
        answer = arguments.get("answer")
        if answer is None:
            return _error(
                f"Missing argument 'answer' (got {sorted(arguments)}): call answer(answer=...)."
            )
        if not isinstance(answer, str):
            answer = str(answer)
        result = self._client.step(ReasoningGymAction(answer=answer))
        observation = result.observation
        if observation.error:
            return ToolResult(
                data={"error": observation.error}, done=bool(result.done), error=observation.error
            )
        self._last_result = result
        return ToolResult(
            data={
                "answer": answer,
                "score": observation.score,
                "correct_answer": observation.correct_answer,
                "reward": result.reward,
                "done": bool(result.done),
            },
            done=bool(result.done),
            metadata={"reward": result.reward, "score": observation.score},
        )

    def verify(self, transcript: list[dict[str, Any]], final_state: Any = None) -> VerifyResult:
        last = self._last_result
        return VerifyResult(
            env_reward=None if last is None else last.reward,
            done=last is not None and bool(last.done),
            metrics={"answered": last is not None},
            artifacts={
                "dataset_name": self.dataset_name,
                "seed": self.seed,
                "question": self.question,
                "correct_answer": None if last is None else last.observation.correct_answer,
                "transcript_length": len(transcript),
            },
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._client.close()
        except Exception:
            pass  # the server may already be gone; nothing left to release here


class ReasoningGymSessionFactory(ResourceSessionFactory[ReasoningGymSession]):
    """Opens one `ReasoningGymSession` (one WebSocket session, one question) per episode.

    Args:
        client_factory: zero-argument callable returning a (not yet connected) client,
            e.g. ``lambda: ReasoningGymEnv(base_url=url)``.
        dataset_name: reasoning_gym dataset, e.g. "chain_sum".
        dataset_config: its config; None or {} means reasoning_gym's defaults.
        seed: base seed making the episode sequence reproducible (episode k uses seed + k);
            None derives each episode's seed from its `episode_id` (the dataset, its config and the
            id, hashed), or draws a random one when `create` gets no id. A `seed` given to `create`
            wins over both.
    """

    def __init__(
        self,
        client_factory: Callable[[], ReasoningGymEnv],
        *,
        dataset_name: str = "chain_sum",
        dataset_config: Optional[dict[str, Any]] = None,
        seed: Optional[int] = None,
    ):
        self._client_factory = client_factory
        self.dataset_name = dataset_name
        self.dataset_config = dict(dataset_config or {})
        self.base_seed = seed
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._rng = random.SystemRandom()

    def _episode_seed(self, seed: Optional[int], episode_id: Optional[str] = None) -> int:
        if seed is not None:
            return int(seed)
        if self.base_seed is not None:
            with self._lock:
                return self.base_seed + next(self._counter)
        if episode_id is not None:
            key = json.dumps([self.dataset_name, self.dataset_config, episode_id], sort_keys=True)
            return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % 2**31
        return self._rng.randrange(2**31)

    def create(
        self,
        task: Any = None,
        seed: Optional[int] = None,
        episode_id: Optional[str] = None,
    ) -> ReasoningGymSession:
        return ReasoningGymSession(
            self._client_factory(),
            dataset_name=self.dataset_name,
            dataset_config=self.dataset_config,
            seed=self._episode_seed(seed, episode_id),
            episode_id=episode_id,
            task=task,
        )


__all__ = ["ANSWER_TOOL", "ReasoningGymSession", "ReasoningGymSessionFactory"]
