"""reasoning_gym wire contract with upstream OpenEnv (envs/reasoning_gym_env at commit 685de411),
both directions, independent of our models:

- upstream-shaped frames (written out below from upstream's models.py / server) fed to our
  client's parser; our client over the real WebSocket against a stand-in upstream server
  (tests/upstream_apps.py) for a whole episode, a composite reset and `openenv collect`;
- our server's frames checked against upstream's shapes (what upstream's client builds from them).
"""

from __future__ import annotations

import json

import pytest
import reasoning_gym
from websockets.sync.client import connect

from helpers.servers import LocalServer, ServerError, check_sessions
from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv

CHAIN_SUM = {"min_terms": 2, "max_terms": 3, "min_digits": 2, "max_digits": 2}

# Upstream frames, as its server sends them (Observation.model_dump minus reward/done + metadata).
UPSTREAM_RESET = {"observation": {"question": "What is 1 + 1?", "score": None, "correct_answer": None,
                                  "dataset_metadata": None, "metadata": {}}, "reward": 0.0, "done": False,
                  "metadata": {}}
UPSTREAM_STEP = {"observation": {"question": None, "score": 1.0, "correct_answer": "2",
                                 "dataset_metadata": {"source_dataset": "chain_sum"}, "metadata": {}},
                 "reward": 1.0, "done": True, "metadata": {}}
UPSTREAM_STEP_NO_QUESTION_YET = {"observation": {"question": None, "score": None, "correct_answer": None,
                                                 "dataset_metadata": None, "metadata": {}},
                                 "reward": 0.0, "done": True}
# What upstream's client reads: these observation fields (each Optional), episode_id/step_count of state.
UPSTREAM_OBSERVATION_FIELDS = {"question": (str, type(None)), "score": (float, int, type(None)),
                               "correct_answer": (str, type(None)), "dataset_metadata": (dict, type(None))}


@pytest.fixture(scope="module")
def upstream_server(tmp_path_factory):
    with LocalServer("tests.upstream_apps:reasoning_gym_app", factory=True, name="upstream-reasoning-gym",
                     log_dir=tmp_path_factory.mktemp("upstream-rg")) as server:
        yield server


def test_our_parser_takes_upstream_frames():
    client = ReasoningGymEnv(base_url="http://127.0.0.1:9")  # never connects: the parser only
    reset = client._parse_result(UPSTREAM_RESET)
    assert (reset.observation.question, reset.reward, reset.done) == ("What is 1 + 1?", 0.0, False)
    step = client._parse_result(UPSTREAM_STEP)  # pydantic refused `question: null` before the fix
    assert step.observation.question is None and step.observation.correct_answer == "2"
    assert (step.reward, step.done, step.observation.error) == (1.0, True, None)
    empty = client._parse_result(UPSTREAM_STEP_NO_QUESTION_YET)
    assert empty.done and empty.observation.score is None


def test_our_client_plays_on_an_upstream_shaped_server(upstream_server):
    local = reasoning_gym.create_dataset("chain_sum", seed=4, size=3, **CHAIN_SUM)
    with ReasoningGymEnv(base_url=upstream_server.base_url).sync() as env:
        result = env.reset(dataset_name="chain_sum", dataset_config=CHAIN_SUM, seed=4, size=3)
        assert result.observation.question == local[0]["question"] and result.reward == 0.0
        result = env.step(ReasoningGymAction(answer=local[0]["answer"]))
        assert result.reward == 1.0 and result.done and result.observation.question is None
        assert result.observation.correct_answer == local[0]["answer"]
        assert env.reset().observation.question == local[1]["question"]
        result = env.reset(dataset_name="composite", seed=1, size=4,
                           dataset_specs=[{"name": "chain_sum", "config": CHAIN_SUM}, {"name": "leg_counting"}])
        assert result.observation.question
        assert env.state().step_count == 0


def test_one_session_upstream_server_fails_the_preflight_with_what_to_do(upstream_server):
    check_sessions(upstream_server.base_url, 1)
    with pytest.raises(ServerError, match=r"refused session 2 of the 2.*CAPACITY_REACHED.*max_concurrent_envs=1"):
        check_sessions(upstream_server.base_url, 2)


def test_openenv_collect_through_our_harness_collects_from_an_upstream_shaped_server(upstream_server, tmp_path):
    from openenv.cli.commands.collect import _build_session_factory
    from openenv.core.harness import HarnessRunLimits, MCPHarnessAdapter, ModelStepResult
    from openenv.core.harness.collect import CollectRunner, RolloutSerializer
    from openenv.core.llm_client import LLMResponse, ToolCall

    def teacher(messages, tools, sampling):
        expression = messages[-1]["content"].rsplit(":", 1)[1].strip().rstrip("=")
        return ModelStepResult(response=LLMResponse(content="", tool_calls=[
            ToolCall(id="c0", name="answer", args={"answer": str(eval(expression))})]))

    runner = CollectRunner(
        session_factory=_build_session_factory("reasoning_gym:chain_sum", upstream_server.base_url,
                                               dataset_config=CHAIN_SUM),
        harness_adapter=MCPHarnessAdapter(), serializer=RolloutSerializer(tmp_path),
        limits=HarnessRunLimits(max_turns=3))
    result = runner.run(model_step=teacher, num_episodes=3)
    assert (result.num_collected, result.num_failed, result.avg_reward) == (3, 0, 1.0)


def test_a_collection_of_nothing_is_an_error():
    from helpers.chain_sum.sft_data import CollectSummary, check_collected

    with pytest.raises(RuntimeError, match="collected 0 of 3 episodes \\(3 failed"):
        check_collected(CollectSummary(requested=3, in_file=0, collected=0, failed=3, output="..."))
    check_collected(CollectSummary(requested=3, in_file=3, skipped=3))  # all resumed: fine
    check_collected(CollectSummary(requested=3, in_file=1, collected=1, failed=2))


def test_our_server_sends_only_what_upstreams_client_accepts(rg_server):
    url = rg_server.base_url.replace("http://", "ws://") + "/ws"
    with connect(url) as ws:
        frames = []
        for message in ({"type": "reset", "data": {"dataset_name": "chain_sum", "dataset_config": CHAIN_SUM,
                                                     "seed": 1, "size": 5}},
                        {"type": "step", "data": {"answer": "0"}},
                        {"type": "reset", "data": {"dataset_name": "composite", "seed": 1, "size": 5,
                                                   "dataset_specs": [{"name": "leg_counting"}]}},
                        {"type": "state"}):
            ws.send(json.dumps(message))
            frames.append(json.loads(ws.recv()))
    for frame in frames[:3]:
        assert frame["type"] == "observation", frame
        observation = frame["data"]["observation"]
        for name, types in UPSTREAM_OBSERVATION_FIELDS.items():
            assert isinstance(observation.get(name), types), (name, observation.get(name))
        assert isinstance(frame["data"]["reward"], float) and isinstance(frame["data"]["done"], bool)
    assert frames[0]["data"]["reward"] == 0.0  # as upstream after reset
    state = frames[3]["data"]
    assert isinstance(state["episode_id"], str) and isinstance(state["step_count"], int)
