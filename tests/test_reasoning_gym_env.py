"""reasoning_gym_env against a real server: real uvicorn process, real WebSocket, no mocks."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
import urllib.error
import urllib.request

import pytest
import reasoning_gym

from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv, ReasoningGymState

SEED_CONFIG = {"min_terms": 2, "max_terms": 3, "min_digits": 2, "max_digits": 2}


# The server: the session-scoped `rg_server` fixture in conftest.py (helpers.servers.LocalServer,
# MAX_CONCURRENT_ENVS=32, logs to a file).


# -- helpers -----------------------------------------------------------------------------------


def solve_chain_sum(question: str) -> str:
    """Compute a chain_sum question ourselves ("... problem: 15 - 43 - 75 =" -> "-103")."""
    expression = question.rsplit(":", 1)[1].strip().rstrip("=").strip()
    tokens = expression.split()
    total = int(tokens[0])
    for op, number in zip(tokens[1::2], tokens[2::2]):
        total = total + int(number) if op == "+" else total - int(number)
    return str(total)


def local_questions(name, config, seed, size, n):
    dataset = reasoning_gym.create_dataset(name, seed=seed, size=size, **config)
    return [dataset[i % size]["question"] for i in range(n)]


def run(coro):
    return asyncio.run(coro)


# -- the seeds' client API ---------------------------------------------------------------------


def test_full_episode_async(rg_server):
    async def episode():
        async with ReasoningGymEnv(base_url=rg_server.base_url) as env:
            result = await env.reset(dataset_name="chain_sum", dataset_config=SEED_CONFIG,
                                     seed=123, size=1000)
            question = result.observation.question
            assert question.startswith("State the final answer") and not result.done
            assert result.reward == 0.0 and result.observation.score is None  # 0.0 after reset, as upstream
            assert result.observation.correct_answer is None
            state = await env.state()
            assert isinstance(state, ReasoningGymState)
            assert (state.dataset_name, state.seed, state.size, state.question_index) == (
                "chain_sum", 123, 1000, 0)
            result = await env.step(ReasoningGymAction(answer=solve_chain_sum(question)))
            return question, result

    question, result = run(episode())
    assert result.done and result.observation.done
    assert result.reward == 1.0 and result.observation.score == 1.0
    assert result.observation.correct_answer == solve_chain_sum(question)
    assert result.observation.dataset_metadata["source_dataset"] == "chain_sum"
    assert result.observation.error is None


def test_full_episode_sync_and_default_dataset(rg_server):
    with ReasoningGymEnv(base_url=rg_server.base_url).sync() as env:
        result = env.reset()  # no dataset given: chain_sum, seeds' config, seed 0, size 1000
        assert result.observation.question == local_questions("chain_sum", SEED_CONFIG, 0, 1000, 1)[0]
        state = env.state()
        assert (state.dataset_name, state.dataset_config, state.seed, state.size) == (
            "chain_sum", SEED_CONFIG, 0, 1000)
        result = env.step(ReasoningGymAction(answer=solve_chain_sum(result.observation.question)))
        assert result.done and result.reward == 1.0


def test_sync_client_inside_running_event_loop(rg_server):
    """What a Jupyter cell does: the blocking client while an event loop is running."""
    async def inside_loop():
        env = ReasoningGymEnv(base_url=rg_server.base_url).sync()
        try:
            question = env.reset(seed=5).observation.question
            return env.step(ReasoningGymAction(answer=solve_chain_sum(question))).reward
        finally:
            env.close()

    assert run(inside_loop()) == 1.0


def test_scoring_is_done_by_the_env(rg_server):
    with ReasoningGymEnv(base_url=rg_server.base_url).sync() as env:
        question = env.reset(dataset_name="chain_sum", dataset_config=SEED_CONFIG,
                             seed=7, size=10).observation.question
        right = solve_chain_sum(question)
        wrong = env.step(ReasoningGymAction(answer=str(int(right) + 1)))
        assert wrong.done and wrong.reward == 0.0 and wrong.observation.score == 0.0
        assert wrong.observation.correct_answer == right

        env.reset(dataset_name="chain_sum", dataset_config=SEED_CONFIG, seed=7, size=10)
        padded = env.step(ReasoningGymAction(answer=f" {right} "))  # reasoning_gym strips
        assert padded.reward == 1.0

        env.reset(dataset_name="chain_sum", dataset_config=SEED_CONFIG, seed=7, size=10)
        as_number = env.step(ReasoningGymAction(answer=int(right)))  # ints become text
        assert as_number.reward == 1.0


def test_reset_without_args_serves_next_question_and_wraps(rg_server):
    with ReasoningGymEnv(base_url=rg_server.base_url).sync() as env:
        seen = [env.reset(dataset_name="chain_sum", dataset_config=SEED_CONFIG,
                          seed=11, size=3).observation.question]
        for _ in range(3):
            seen.append(env.reset().observation.question)
            assert env.state().question_index == (len(seen) - 1) % 3
        assert seen == local_questions("chain_sum", SEED_CONFIG, 11, 3, 4)
        assert len(set(seen[:3])) == 3  # fresh questions...
        assert seen[3] == seen[0]  # ...wrapping around after `size`


def test_same_seed_same_questions(rg_server):
    def questions(seed):
        with ReasoningGymEnv(base_url=rg_server.base_url).sync() as env:
            out = [env.reset(dataset_name="chain_sum", dataset_config=SEED_CONFIG,
                             seed=seed, size=1000).observation.question]
            out += [env.reset().observation.question for _ in range(4)]
            return out

    first, again, other = questions(42), questions(42), questions(43)
    assert first == again == local_questions("chain_sum", SEED_CONFIG, 42, 1000, 5)
    assert first != other


def test_concurrent_sessions(rg_server):
    n = 20

    async def episode(i):
        async with ReasoningGymEnv(base_url=rg_server.base_url) as env:
            result = await env.reset(dataset_name="chain_sum", dataset_config=SEED_CONFIG,
                                     seed=1000 + i, size=50)
            question = result.observation.question
            await asyncio.sleep(0.05)  # keep every session open at the same time
            result = await env.step(ReasoningGymAction(answer=solve_chain_sum(question)))
            return question, result.reward

    async def all_episodes():
        return await asyncio.gather(*(episode(i) for i in range(n)))

    results = run(all_episodes())
    assert [reward for _, reward in results] == [1.0] * n
    # each session served its own dataset: no state leaked between sessions
    assert [q for q, _ in results] == [
        local_questions("chain_sum", SEED_CONFIG, 1000 + i, 50, 1)[0] for i in range(n)]


def test_unknown_dataset_and_bad_config_are_clear_errors(rg_server):
    with ReasoningGymEnv(base_url=rg_server.base_url).sync() as env:
        env.reset(dataset_name="chain_sum", dataset_config=SEED_CONFIG, seed=3, size=10)

        with pytest.raises(RuntimeError) as info:
            env.reset(dataset_name="chain_summ")
        message = str(info.value)
        assert "Unknown reasoning_gym dataset_name 'chain_summ'" in message
        assert "Valid names" in message
        for name in ("chain_sum", "simple_equations", "letter_counting", "propositional_logic"):
            assert name in message

        with pytest.raises(RuntimeError, match="Unknown dataset_config key.*'chain_sum': foo"):
            env.reset(dataset_name="chain_sum", dataset_config={"foo": 1})
        with pytest.raises(RuntimeError, match="max_terms must be >= min_terms"):
            env.reset(dataset_name="chain_sum", dataset_config={"min_terms": 5, "max_terms": 2})

        # the session survived and still serves its previous dataset
        result = env.reset()
        assert result.observation.question == local_questions("chain_sum", SEED_CONFIG, 3, 10, 2)[1]
        assert env.step(ReasoningGymAction(answer=solve_chain_sum(result.observation.question))).reward == 1.0


def test_http_reset_with_unknown_dataset_is_a_400(rg_server):
    request = urllib.request.Request(
        rg_server.base_url + "/reset", data=json.dumps({"dataset_name": "nope"}).encode(),
        headers={"Content-Type": "application/json"}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=10)
    assert info.value.code == 400
    assert "Valid names" in json.loads(info.value.read())["detail"]


def test_malformed_actions_do_not_kill_the_session(rg_server):
    with ReasoningGymEnv(base_url=rg_server.base_url).sync() as env:
        before = env.step(ReasoningGymAction(answer="1"))  # step before any reset
        assert before.done and before.reward is None
        assert "reset()" in before.observation.error

        # wrong types / missing field on the wire: refused by validation, naming the field
        with pytest.raises(RuntimeError, match=r"VALIDATION_ERROR") as info:
            env.step(ReasoningGymAction.model_construct(answer=["1"]))
        assert "answer" in str(info.value)
        with pytest.raises(RuntimeError, match=r"answer: Input should be a valid string"):
            env.step(ReasoningGymAction.model_construct(answer=None))

        question = env.reset(seed=9).observation.question
        right = solve_chain_sum(question)
        # a bare number on the wire is accepted as its text
        assert env.step(ReasoningGymAction.model_construct(answer=int(right))).reward == 1.0
        after = env.step(ReasoningGymAction(answer=right))  # step after done
        assert after.done and after.reward is None and "already answered" in after.observation.error

        question = env.reset().observation.question
        assert env.step(ReasoningGymAction(answer=solve_chain_sum(question))).reward == 1.0


def test_raw_websocket_protocol_errors(rg_server):
    """A hand-written client: bad JSON, missing field, unknown message type; the session lives on."""
    from websockets.sync.client import connect

    with connect(rg_server.base_url.replace("http", "ws") + "/ws") as ws:
        def send(message):
            ws.send(message if isinstance(message, str) else json.dumps(message))
            return json.loads(ws.recv(timeout=10))

        assert send("{not json")["data"]["code"] == "INVALID_JSON"
        missing = send({"type": "step", "data": {}})
        assert missing["data"]["code"] == "VALIDATION_ERROR"
        assert missing["data"]["errors"][0]["loc"] == ["answer"]
        extra = send({"type": "step", "data": {"answer": "1", "confidence": 0.9}})
        assert extra["data"]["code"] == "VALIDATION_ERROR"
        assert send({"type": "dance"})["data"]["code"] == "UNKNOWN_TYPE"

        reset = send({"type": "reset", "data": {"seed": 2}})
        question = reset["data"]["observation"]["question"]
        step = send({"type": "step", "data": {"answer": solve_chain_sum(question)}})
        assert step["data"]["reward"] == 1.0 and step["data"]["done"] is True
        assert step["data"]["observation"]["correct_answer"] == solve_chain_sum(question)


@pytest.mark.parametrize("name", ["simple_equations", "letter_counting", "propositional_logic"])
def test_other_datasets(rg_server, name):
    with ReasoningGymEnv(base_url=rg_server.base_url).sync() as env:
        first = env.reset(dataset_name=name, seed=4, size=20)
        assert first.observation.question == local_questions(name, {}, 4, 20, 1)[0]
        wrong = env.step(ReasoningGymAction(answer="zzz not an answer"))
        assert wrong.done and wrong.reward < 1.0
        correct = wrong.observation.correct_answer
        assert correct  # propositional_logic has no single answer: its example answer is given

        again = env.reset(dataset_name=name, seed=4, size=20)
        assert again.observation.question == first.observation.question
        right = env.step(ReasoningGymAction(answer=correct))
        assert right.done and right.reward == 1.0


# -- the harness `openenv collect reasoning_gym:<dataset>` uses ---------------------------------


def _collect_factory(base_url, dataset_config):
    from openenv.cli.commands.collect import _build_session_factory

    from reasoning_gym_env.harness import ReasoningGymSessionFactory

    factory = _build_session_factory("reasoning_gym:chain_sum", base_url,
                                     dataset_config=dataset_config)
    assert isinstance(factory, ReasoningGymSessionFactory)
    return factory


def test_harness_session_like_openenv_collect(rg_server):
    factory = _collect_factory(rg_server.base_url, SEED_CONFIG)
    questions = []
    for i in range(3):
        session = factory.create(task=None, episode_id=f"ep-{i:06d}")
        try:
            tools = session.list_tools()
            assert [t.name for t in tools] == ["answer"]
            assert tools[0].input_schema["required"] == ["answer"]
            messages = session.initial_messages()
            assert messages[0]["role"] == "user"
            question = messages[0]["content"]
            questions.append(question)

            # model mistakes come back as errors the model can read; the episode goes on
            assert session.call_tool("submit", {"answer": "1"}).error
            assert "Missing argument 'answer'" in session.call_tool("answer", {"x": 1}).error

            result = session.call_tool("answer", {"answer": solve_chain_sum(question)})
            assert result.done and result.error is None
            assert result.metadata["reward"] == 1.0 and result.data["score"] == 1.0
            assert session.call_tool("answer", {"answer": "0"}).error  # answered already

            verify = session.verify(transcript=messages, final_state=None)
            assert verify.env_reward == 1.0 and verify.done
        finally:
            session.close()
    assert len(set(questions)) == 3  # a fresh question every episode


def test_harness_seeds_and_wrong_answer(rg_server):
    from reasoning_gym_env.harness import ReasoningGymSessionFactory

    factory = ReasoningGymSessionFactory(lambda: ReasoningGymEnv(base_url=rg_server.base_url),
                                         dataset_name="chain_sum", dataset_config=SEED_CONFIG,
                                         seed=100)
    sessions = [factory.create(task=None) for _ in range(2)] + [factory.create(task=None, seed=100)]
    try:
        # base seed 100: episode k is question k of the dataset with seed 100; seed= wins
        expected = local_questions("chain_sum", SEED_CONFIG, 100, 2, 2)
        assert [s.initial_messages()[0]["content"] for s in sessions] == expected + expected[:1]
        question = sessions[0].initial_messages()[0]["content"]
        result = sessions[0].call_tool("answer", {"answer": str(int(solve_chain_sum(question)) + 1)})
        assert result.done and result.metadata["reward"] == 0.0
        assert sessions[0].verify(transcript=[]).env_reward == 0.0
        assert sessions[1].verify(transcript=[]).env_reward is None  # never answered
    finally:
        for s in sessions:
            s.close()


def test_collect_runner_end_to_end(rg_server, tmp_path):
    """CollectRunner + MCPHarnessAdapter exactly as `openenv collect`, with a scripted teacher."""
    from openenv.core.harness import HarnessRunLimits, MCPHarnessAdapter, ModelStepResult
    from openenv.core.harness.collect import CollectRunner, RolloutSerializer
    from openenv.core.llm_client import LLMResponse, ToolCall

    def teacher(messages, tools, sampling):
        question = messages[-1]["content"]
        return ModelStepResult(response=LLMResponse(content="", tool_calls=[
            ToolCall(id="call-0", name=tools[0].name, args={"answer": solve_chain_sum(question)})]))

    def collect(folder):
        """One collection of 4 episodes into `folder`: the run's result and the records it wrote."""
        runner = CollectRunner(
            session_factory=_collect_factory(rg_server.base_url, SEED_CONFIG),
            harness_adapter=MCPHarnessAdapter(),
            serializer=RolloutSerializer(folder),
            limits=HarnessRunLimits(max_turns=3),
        )
        result = runner.run(model_step=teacher, num_episodes=4)
        return result, [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]

    result, records = collect(tmp_path)
    assert (result.num_collected, result.num_failed, result.avg_reward) == (4, 0, 1.0)
    assert [r["reward"] for r in records] == [1.0] * 4
    # the CLI passes no seed: each episode's question follows from its id, so a second collection is the same
    _, repeated = collect(tmp_path / "again")
    questions = [r["messages"][0]["content"] for r in records]
    assert [r["messages"][0]["content"] for r in repeated] == questions and len(set(questions)) == 4
    call = records[0]["messages"][1]["tool_calls"][0]["function"]
    assert call["name"] == "answer" and "answer" in json.loads(call["arguments"])
    assert records[0]["messages"][2]["role"] == "tool"


def test_collect_seeds_follow_the_episode_id_and_miss_the_held_out_seeds():
    """`openenv collect` passes no seed: the question of `ep-000012` is fixed by the dataset, its config and that
    id, differs between ids and configs, and the first 10,000 ids never land on the held-out evaluation's seeds."""
    from helpers.chain_sum.evaluation import EVAL_SEED
    from reasoning_gym_env.harness import ReasoningGymSessionFactory

    def seeds(config):
        factory = ReasoningGymSessionFactory(lambda: None, dataset_name="chain_sum", dataset_config=config)
        return [factory._episode_seed(None, f"ep-{i:06d}") for i in range(10_000)]

    first, other = seeds(SEED_CONFIG), seeds({**SEED_CONFIG, "max_terms": 4})
    assert first == seeds(dict(SEED_CONFIG)) and len(set(first)) == 10_000 and not set(first) & set(other)
    assert not [seed for seed in first if EVAL_SEED <= seed < EVAL_SEED + 10_000]


def test_session_beyond_capacity_gets_clear_error(rg_server):
    """Open sessions until the server refuses one: the refusal is immediate and explicit."""
    async def probe():
        clients, refusal = [], None
        try:
            for _ in range(100):
                env = ReasoningGymEnv(base_url=rg_server.base_url, message_timeout_s=10)
                clients.append(env)
                try:
                    await env.reset()
                except RuntimeError as exc:
                    refusal = str(exc)
                    break
            opened = len(clients) - 1
            # a slot freed is a slot usable again (the server frees it just after the close)
            await clients[0].close()
            for _ in range(100):
                env = ReasoningGymEnv(base_url=rg_server.base_url)
                clients.append(env)
                try:
                    return refusal, opened, await env.reset(seed=1)
                except RuntimeError:
                    await asyncio.sleep(0.05)
            return refusal, opened, None
        finally:
            for env in clients:
                try:
                    await env.close()
                except Exception:
                    pass
            await asyncio.sleep(0.5)  # the server frees slots just after the close handshake

    start = time.monotonic()
    refusal, opened, reopened = run(probe())
    assert refusal is not None, "the server never refused a session"
    assert "CAPACITY_REACHED" in refusal and "Server at capacity" in refusal
    active, cap = map(int, re.search(r"(\d+)/(\d+) sessions active", refusal).groups())
    assert active == cap and 0 < opened <= cap  # sessions of earlier tests may still be closing
    assert reopened is not None and reopened.observation.question
    assert time.monotonic() - start < 20  # no hang


# -- last: the server stayed quiet -------------------------------------------------------------


def test_server_log_has_no_tracebacks(rg_server):
    log = rg_server.log_path.read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
    assert not re.search(r"connection (open|closed)", log)


# -- composite datasets (upstream's `dataset_specs`) and bounds on hostile input ----------------


def test_composite_dataset_specs_mix_datasets_as_upstream(rg_server):
    specs = [{"name": "chain_sum", "weight": 1, "config": SEED_CONFIG}, {"name": "leg_counting"}]
    from reasoning_gym.composite import DatasetSpec

    local = reasoning_gym.create_dataset("composite", seed=5, size=6, datasets=[
        DatasetSpec(name="chain_sum", weight=1, config=SEED_CONFIG), DatasetSpec(name="leg_counting", weight=1, config={})])
    with ReasoningGymEnv(base_url=rg_server.base_url).sync() as env:
        served = [env.reset(dataset_name="composite", dataset_specs=specs, seed=5, size=6).observation.question]
        served += [env.reset().observation.question for _ in range(5)]
        assert served == [local[i]["question"] for i in range(6)]
        assert env.state().dataset_specs == specs
        result = env.step(ReasoningGymAction(answer=str(local[5]["answer"])))
        assert result.reward == 1.0
        assert result.observation.dataset_metadata["source_dataset"] in ("chain_sum", "leg_counting")
        with pytest.raises(RuntimeError, match='composite.*needs dataset_specs'):
            env.reset(dataset_name="composite", seed=1, size=5)
        with pytest.raises(RuntimeError, match=r"dataset_specs\[1\]: Unknown reasoning_gym dataset_name 'nope'"):
            env.reset(dataset_name="composite", dataset_specs=[{"name": "chain_sum"}, {"name": "nope"}], seed=1, size=5)
        with pytest.raises(RuntimeError, match=r"Unknown dataset_config key.*'leg_counting': foo"):
            env.reset(dataset_name="composite", dataset_specs=[{"name": "leg_counting", "config": {"foo": 1}}],
                      seed=1, size=5)


@pytest.mark.parametrize("reset, limit", [
    ({"dataset_name": "chain_sum", "dataset_config": {"min_terms": 200_000, "max_terms": 200_000}},
     "MAX_CONFIG_INT"),
    ({"dataset_name": "chain_sum", "dataset_config": {"min_terms": 90_000, "max_terms": 90_000}},
     "MAX_QUESTION_CHARS"),
    ({"dataset_name": "chain_sum", "size": 10**15}, "MAX_DATASET_SIZE"),
    ({"dataset_name": "composite", "dataset_specs": [{"name": "chain_sum"}] * 51}, "limit is 50"),
], ids=["200k-terms", "huge-question", "size-1e15", "too-many-parts"])
def test_resets_over_the_servers_bounds_are_refused_naming_the_limit(rg_server, reset, limit):
    with ReasoningGymEnv(base_url=rg_server.base_url).sync() as env:
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=limit):
            env.reset(seed=1, **{"size": 10, **reset})
        assert time.monotonic() - start < 5
        assert env.step(ReasoningGymAction(answer="1")).observation.error is not None  # nothing built
        result = env.reset(dataset_name="chain_sum", dataset_config=SEED_CONFIG, seed=1, size=10)
        assert env.step(ReasoningGymAction(answer=solve_chain_sum(result.observation.question))).reward == 1.0


def test_an_answer_over_the_limit_is_a_validation_error_naming_it(rg_server):
    """A 16 MB answer used to be scored (and a Wordle guess kept in every later reply); now any
    answer over MAX_ANSWER_CHARS is refused before it reaches the environment."""
    from websockets.asyncio.client import connect

    from reasoning_gym_env.models import MAX_ANSWER_CHARS

    async def scenario():
        url = rg_server.base_url.replace("http://", "ws://") + "/ws"
        async with connect(url, max_size=None) as ws:
            await ws.send(json.dumps({"type": "reset", "data": {"dataset_name": "chain_sum",
                                                                 "dataset_config": SEED_CONFIG, "seed": 1, "size": 10}}))
            question = json.loads(await ws.recv())["data"]["observation"]["question"]
            await ws.send(json.dumps({"type": "step", "data": {"answer": "7" * (MAX_ANSWER_CHARS + 1)}}))
            refusal = json.loads(await ws.recv())
            await ws.send(json.dumps({"type": "step", "data": {"answer": solve_chain_sum(question)}}))
            return refusal, json.loads(await ws.recv())

    refusal, scored = run(scenario())
    assert refusal["data"]["code"] == "VALIDATION_ERROR", refusal
    assert f"at most {MAX_ANSWER_CHARS} characters" in json.dumps(refusal), refusal
    assert scored["data"]["reward"] == 1.0  # the session went on


@pytest.mark.parametrize("reset, says", [
    ({"dataset_name": "y" * 1_000_000}, "(1,000,000 characters)"),
    ({"dataset_name": "chain_sum", "dataset_config": {f"k{i}": i for i in range(10_000)}}, "and 9,990 more"),
    ({"dataset_name": "chain_sum", "dataset_config": "{" * 200_000}, "dataset_config is not valid JSON"),
], ids=["1MB-name", "10k-keys", "200k-chars-of-config"])
def test_refusals_quote_a_short_prefix_of_the_bad_value(rg_server, reset, says):
    """A 1 MB dataset name came back as a 1 MB error, a 10,000-key config as 69 KB; the refusal now
    quotes the start of the value and its size, and still says what is valid."""
    from websockets.sync.client import connect

    with connect(rg_server.base_url.replace("http://", "ws://") + "/ws", max_size=None) as ws:
        ws.send(json.dumps({"type": "reset", "data": reset}))
        reply = ws.recv()
    assert len(reply) < 5_000 and says in reply, reply[:500]
    assert json.loads(reply)["data"]["code"] == "EXECUTION_ERROR"
