"""reasoning_gym wire contract with upstream OpenEnv (envs/reasoning_gym_env of huggingface/OpenEnv,
read at commits 685de411 and 385de5eb), both directions, independent of our models:

- upstream-shaped frames (written out below from upstream's models.py / server) fed to our
  client's parser; our client over the real WebSocket against a stand-in upstream server
  (tests/upstream_apps.py) for a whole episode, a composite reset and `openenv collect`;
- the capacity a hosted Space shows: one session (built up to 685de411) or MAX_CONCURRENT_ENVS,
  default 8 (from 522baf00, #619), both stand-ins through our preflight `check_sessions`;
- our server's frames checked against upstream's shapes (what upstream's client builds from them);
- opt-in, with OPENENV_UPSTREAM naming checkouts of huggingface/OpenEnv: upstream's own server and
  client from each checkout, both ways (tests/upstream_apps.py, "real upstream snapshots").
"""

from __future__ import annotations

import json

import pytest
import reasoning_gym
from websockets.sync.client import connect

from helpers.servers import LocalServer, ServerError, check_sessions
from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv
from upstream_apps import run_upstream_client, snapshot_app_source, snapshot_env, snapshot_params

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


def our_client_plays(base_url):
    """Our client on the server at `base_url`: the same questions as reasoning_gym's own dataset, scored 1.0 for the
    right answer, the next question on reset, and a composite dataset accepted."""
    local = reasoning_gym.create_dataset("chain_sum", seed=4, size=3, **CHAIN_SUM)
    with ReasoningGymEnv(base_url=base_url).sync() as env:
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


def test_our_client_plays_on_an_upstream_shaped_server(upstream_server):
    our_client_plays(upstream_server.base_url)


def test_one_session_upstream_server_fails_the_preflight_with_what_to_do(upstream_server):
    """A Space built from upstream up to 685de411 (max_concurrent_envs=1 hard-coded)."""
    check_sessions(upstream_server.base_url, 1)
    with pytest.raises(ServerError, match=r"refused session 2 of the 2.*CAPACITY_REACHED.*max_concurrent_envs=1"):
        check_sessions(upstream_server.base_url, 2)


@pytest.mark.parametrize("setting, sessions", [(None, 8), ("3", 3)])
def test_a_newer_upstream_server_holds_max_concurrent_envs_sessions(setting, sessions, tmp_path):
    """A Space built from upstream since 522baf00 (#619, 385de5eb): MAX_CONCURRENT_ENVS sessions, default 8, each
    with its own dataset; the preflight's refusal names the variable to set."""
    env = {"MAX_CONCURRENT_ENVS": setting} if setting else {}
    with LocalServer("tests.upstream_apps:reasoning_gym_concurrent_app", factory=True, env=env,
                     name="upstream-reasoning-gym-8", log_dir=tmp_path) as server:
        check_sessions(server.base_url, sessions)
        with pytest.raises(ServerError, match=rf"refused session {sessions + 1} of the {sessions + 1}.*"
                                              rf"{sessions}/{sessions} sessions.*MAX_CONCURRENT_ENVS"):
            check_sessions(server.base_url, sessions + 1)
        local = reasoning_gym.create_dataset("chain_sum", seed=4, size=3, **CHAIN_SUM)
        with ReasoningGymEnv(base_url=server.base_url).sync() as one, \
                ReasoningGymEnv(base_url=server.base_url).sync() as two:
            one.reset(dataset_name="chain_sum", dataset_config=CHAIN_SUM, seed=4, size=3)
            assert two.reset().observation.question != local[0]["question"]  # its own (default) dataset
            assert one.reset().observation.question == local[1]["question"]  # one's iterator untouched


def collect_three_through_our_harness(base_url, tmp_path):
    """Our `openenv collect` harness (openenv.core.harness, as the CLI builds it) answers three chain_sum questions
    exactly on the server at `base_url`: all three collected, none failed, every reward 1.0."""
    from openenv.cli.commands.collect import _build_session_factory
    from openenv.core.harness import HarnessRunLimits, MCPHarnessAdapter, ModelStepResult
    from openenv.core.harness.collect import CollectRunner, RolloutSerializer
    from openenv.core.llm_client import LLMResponse, ToolCall

    def teacher(messages, tools, sampling):
        expression = messages[-1]["content"].rsplit(":", 1)[1].strip().rstrip("=")
        return ModelStepResult(response=LLMResponse(content="", tool_calls=[
            ToolCall(id="c0", name="answer", args={"answer": str(eval(expression))})]))

    runner = CollectRunner(
        session_factory=_build_session_factory("reasoning_gym:chain_sum", base_url,
                                               dataset_config=CHAIN_SUM),
        harness_adapter=MCPHarnessAdapter(), serializer=RolloutSerializer(tmp_path),
        limits=HarnessRunLimits(max_turns=3))
    result = runner.run(model_step=teacher, num_episodes=3)
    assert (result.num_collected, result.num_failed, result.avg_reward) == (3, 0, 1.0)


def test_openenv_collect_through_our_harness_collects_from_an_upstream_shaped_server(upstream_server, tmp_path):
    collect_three_through_our_harness(upstream_server.base_url, tmp_path)


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


# -- upstream's own code, from checkouts named by OPENENV_UPSTREAM (skipped when unset) ----------------

UPSTREAM_COLLECT = """
import json, os, sys, tempfile
from openenv.cli.commands.collect import _build_session_factory
from openenv.core.harness import HarnessRunLimits, MCPHarnessAdapter, ModelStepResult
from openenv.core.harness.collect import CollectRunner, RolloutSerializer
from openenv.core.llm_client import LLMResponse, ToolCall
import reasoning_gym_env.harness as harness

def teacher(messages, tools, sampling):
    expression = messages[-1]["content"].rsplit(":", 1)[1].strip().rstrip("=")
    return ModelStepResult(response=LLMResponse(content="", tool_calls=[
        ToolCall(id="c0", name="answer", args={"answer": str(eval(expression))})]))

config = {"min_terms": 2, "max_terms": 3, "min_digits": 2, "max_digits": 2}
runner = CollectRunner(session_factory=_build_session_factory("reasoning_gym:chain_sum", os.environ["BASE_URL"],
                                                              dataset_config=config),
                       harness_adapter=MCPHarnessAdapter(), serializer=RolloutSerializer(tempfile.mkdtemp()),
                       limits=HarnessRunLimits(max_turns=3))
result = runner.run(model_step=teacher, num_episodes=3)
print(json.dumps({"harness": harness.__file__, "collected": result.num_collected, "failed": result.num_failed,
                  "reward": result.avg_reward}))
"""

UPSTREAM_CLIENT_EPISODE = """
import json, os
from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv
import reasoning_gym_env
config = {"min_terms": 2, "max_terms": 3, "min_digits": 2, "max_digits": 2}
out = {"module": reasoning_gym_env.__file__}
with ReasoningGymEnv(base_url=os.environ["BASE_URL"]).sync() as env:
    r = env.reset(dataset_name="chain_sum", dataset_config=config, seed=4, size=3)
    out["reset"] = [r.observation.question, r.reward, r.done]
    r = env.step(ReasoningGymAction(answer="0"))
    out["step"] = [r.observation.score, r.observation.correct_answer, r.reward, r.done,
                   sorted(r.observation.dataset_metadata or {})]
    out["next"] = env.reset().observation.question
    r = env.reset(dataset_name="composite", seed=1, size=4,
                  dataset_specs=[{"name": "chain_sum", "config": config}, {"name": "leg_counting"}])
    out["composite"] = r.observation.question
    s = env.state()
    out["state"] = [type(s.episode_id).__name__, s.step_count]
print(json.dumps(out))
"""


@pytest.fixture(scope="module", params=snapshot_params())
def snapshot(request):
    return request.param


@pytest.fixture(scope="module")
def real_upstream_server(snapshot, tmp_path_factory):
    with LocalServer("reasoning_gym_env.server.app:app", env=snapshot_env(snapshot), name="real-upstream-rg",
                     log_dir=tmp_path_factory.mktemp("real-upstream-rg")) as server:
        yield server


def test_our_client_plays_on_upstreams_own_server(real_upstream_server):
    our_client_plays(real_upstream_server.base_url)


def test_upstreams_own_server_capacity_is_what_the_docs_say(snapshot, real_upstream_server):
    """685de411: one session, hard-coded. Since 522baf00: MAX_CONCURRENT_ENVS, default 8 (read from app.py)."""
    reads_setting = "MAX_CONCURRENT_ENVS" in snapshot_app_source(snapshot, "reasoning_gym_env")
    sessions = 8 if reads_setting else 1
    check_sessions(real_upstream_server.base_url, sessions)
    with pytest.raises(ServerError, match=rf"refused session {sessions + 1} .*CAPACITY_REACHED"):
        check_sessions(real_upstream_server.base_url, sessions + 1)


def test_openenv_collect_through_our_harness_collects_from_upstreams_own_server(real_upstream_server, tmp_path):
    collect_three_through_our_harness(real_upstream_server.base_url, tmp_path)


def test_upstreams_own_client_plays_on_our_server(snapshot, rg_server):
    out = run_upstream_client(snapshot, UPSTREAM_CLIENT_EPISODE, rg_server.base_url)
    assert out["module"].startswith(str(snapshot))  # upstream's client, not ours
    local = reasoning_gym.create_dataset("chain_sum", seed=4, size=3, **CHAIN_SUM)
    assert out["reset"] == [local[0]["question"], 0.0, False]
    score, correct, reward, done, metadata_keys = out["step"]
    assert (correct, done) == (local[0]["answer"], True) and reward == score and score < 1.0
    assert "source_dataset" in metadata_keys
    assert out["next"] == local[1]["question"] and out["composite"]
    assert out["state"] == ["str", 0]


def test_upstreams_own_openenv_collect_collects_from_our_server(snapshot, rg_server):
    """`openenv collect reasoning_gym:...` with upstream's own harness (added by #652, not at 685de411)."""
    if not (snapshot / "src" / "openenv" / "cli" / "commands" / "collect.py").exists():
        pytest.skip("this upstream snapshot has no `openenv collect`")
    out = run_upstream_client(snapshot, UPSTREAM_COLLECT, rg_server.base_url)
    assert out["harness"].startswith(str(snapshot))
    assert (out["collected"], out["failed"], out["reward"]) == (3, 0, 1.0)
