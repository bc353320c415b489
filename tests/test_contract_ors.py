"""The ORS contract: calculator_env on our ORS server, driven by TRL's `OpenRewardSpec` exactly as a catalog
environment is (task list, one session per rollout, tools, rewards, `finished`), including its errors.

Each assertion is a fact of openreward 0.1.167 + TRL 1.16 observed against this server; notebook 04 relies on
every one of them.
"""

from __future__ import annotations

import inspect
import os
import re

import pytest

from calculator_env import SPLIT_SIZES, make_task, true_answer
from helpers.openreward.evaluation import close_episode
from helpers.openreward.local import LocalORSServer, sdk_pointed_at


@pytest.fixture(scope="module")
def spec_at(tmp_path_factory):
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl.experimental.openreward import OpenRewardSpec

    with LocalORSServer("calculator_env.server:app", log_dir=tmp_path_factory.mktemp("ors-logs")) as server:
        with sdk_pointed_at(server.url):
            yield lambda **kw: OpenRewardSpec(server.url, **kw)


def test_the_spec_lists_tasks_as_a_dataset(spec_at):
    spec = spec_at(split="train", num_tasks=3)
    rows = spec.train_dataset
    assert len(rows) == 3 and {"prompt", "task_index", "expression", "difficulty"} <= set(rows.column_names)
    assert rows[0]["task_index"] == 0 and rows[0]["expression"] == make_task("train", 0)["expression"]
    assert rows[0]["prompt"] == [{"role": "user", "content": ""}]   # the prompt arrives from reset()
    assert len(spec_at(split="test", num_tasks=10_000).train_dataset) == SPLIT_SIZES["test"]   # capped at the split


def test_one_rollout_plays_one_session_and_the_environment_grades_it(spec_at):
    spec = spec_at(split="train", num_tasks=2)
    task = make_task("train", 0)
    env = spec.environment_factory()
    prompt = env.reset(**spec.train_dataset[0])
    assert task["expression"] in prompt and str(true_answer(task)) not in re.findall(r"-?\d+", prompt)
    # the tools TRL shows the model: typed, documented methods named after the ORS tools
    assert list(inspect.signature(env.calculate).parameters) == ["expression"]
    assert list(inspect.signature(env.answer).parameters) == ["answer"]
    assert env.calculate(expression=task["expression"]) == str(true_answer(task))
    assert env.reward is None and env.finished is False          # a helper tool pays nothing
    with pytest.raises(TypeError, match="expr"):                 # TRL hands this error back to the model
        env.calculate(expr="1 + 1")
    assert env.answer(answer=str(true_answer(task))) == "Correct."
    assert env.reward == 1.0 and env.finished is True
    assert spec.reward_funcs(environments=[env]) == [1.0]
    late = env.answer(answer="1")
    assert late.startswith("Error: episode_finished")             # returned to the model, not raised
    close_episode(env)                                            # the session ends on the server


def test_a_rollout_without_a_tool_call_has_no_reward(spec_at):
    """Why notebook 04 wraps the reward: an unscored rollout is None, which GRPO cannot average."""
    spec = spec_at(split="train", num_tasks=2)
    env = spec.environment_factory()
    env.reset(**spec.train_dataset[1])
    assert spec.reward_funcs(environments=[env]) == [None]
    close_episode(env)


def test_an_unknown_split_is_refused_by_the_server(spec_at):
    spec = spec_at(split="validation", num_tasks=2)   # lazy: the task list is asked for on first use
    with pytest.raises(Exception, match="Invalid split"):
        spec.train_dataset
