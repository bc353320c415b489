"""helpers.openreward.resilient: notebook 04's ORS sessions (TRL's real `OpenRewardSpec` adapter, the real
`openreward` SDK) against the real local calculator_env server behind tests/fault_proxy.py.

Faults, as an ORS client meets them: a Space waking (503) at connect and when a rollout opens its session; a
/call reply lost after the tool ran (the SDK sends the call again on the same session, and a repeated `answer`
is refused: episode finished); the same cut after the server's first event (the SDK resumes it by itself); the
server restarted behind the same URL (every session gone: 404); a /create reply lost (the SDK's resend is
refused: 400). Each is shown first on the bare adapter, then through `resilient_sessions`: replayed to the
undisturbed episode's reward, or counted failed with reward 0. Last, a tiny GRPOTrainer run through lost replies.
"""

from __future__ import annotations

import os
import re
import time

import pytest

from fault_proxy import FaultProxy
from helpers.openreward.evaluation import close_episode
from helpers.openreward.local import LocalORSServer, open_ors_target, sdk_pointed_at
from helpers.openreward.resilient import NO_REPLAY, RULES, resilient_sessions
from helpers.servers.resilient import TOTALS
from tools.notebooks import NOTEBOOKS_DIR, load_cells

CALL = "/calculatorenv/call"   # the SDK posts /call, the server redirects it here: the request that runs a tool
NB = "04_openreward_spec"


OPENED = []   # adapters with a session: closed after each test, before the proxy goes


@pytest.fixture(autouse=True)
def quiet_trl(monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """Two calculator_env servers: `a` behind the proxy, `b` the one a restarted Space comes back as."""
    logs = tmp_path_factory.mktemp("ors-logs")
    with LocalORSServer(name="ors_a", log_dir=logs) as a, LocalORSServer(name="ors_b", log_dir=logs) as b:
        yield a, b


@pytest.fixture
def proxy(servers):
    with FaultProxy(servers[0].url, one_request_per_connection=True) as p, sdk_pointed_at(p.url):
        yield p
        p.switch_upstream(servers[0].url)
        while OPENED:
            try:
                close_episode(OPENED.pop())
            except Exception:  # noqa: BLE001 - best effort
                pass


@pytest.fixture
def spec(proxy):
    from trl.experimental.openreward import OpenRewardSpec

    spec = OpenRewardSpec(proxy.url, num_tasks=6)   # notebook 04's call, its target the proxy
    spec.train_dataset   # noqa: B018 - built now, before any fault
    return spec


def play(env, row, answer=None, fault=None):
    """One episode as a rollout plays it: reset, calculate, (the fault), answer. Returns the two tool texts."""
    from calculator_env import true_answer

    OPENED.append(env)
    env.reset(**row)
    calculated = env.calculate(expression=row["expression"])
    if fault:
        fault()
    return calculated, env.answer(answer=str(true_answer(row) if answer is None else answer))


def test_the_notebook_trains_through_resilient_sessions():
    """The trainer cell (tagged "trainer") hands GRPOTrainer, or FastGRPOTrainer, its subclass, `resilient_sessions(spec)`:
    what these tests run is what it runs."""
    from tools.notebooks import cell_source

    trainer_cell = cell_source(NOTEBOOKS_DIR / f"{NB}.ipynb", "trainer")
    assert "trainer_class = GRPOTrainer if PLAIN_TRL else FastGRPOTrainer" in trainer_cell
    assert "trainer = trainer_class(" in trainer_cell
    assert re.search(r"environment_factory=resilient_sessions\(spec\)", trainer_cell)
    assert "from helpers.openreward.resilient import resilient_sessions" in trainer_cell


def test_trl_adapter_internals_the_wrapper_relies_on():
    """trl 1.16: tool methods call `_call_ors_tool`, `reset(**row)` opens the session in `_session`."""
    from trl.experimental.openreward.environment import _RolloutEnvironment

    for name in ("_call_ors_tool", "_teardown_session", "_close", "reset"):
        assert callable(getattr(_RolloutEnvironment, name))
    assert set(RULES) == {"calculatorenv"}


def test_a_waking_space_is_announced_at_connect_and_each_new_session_rides_it_out(proxy, capsys):
    from calculator_env import true_answer
    from trl.experimental.openreward import OpenRewardSpec

    proxy.wake_for(2.0)   # at connect: notebook 04's open_ors_target checks the URL first
    start = time.monotonic()
    target, ors = open_ors_target(proxy.url)
    assert time.monotonic() - start >= 1.5 and target == proxy.url
    assert capsys.readouterr().out.splitlines() == [
        f"environment at {proxy.url} is starting (503); retrying for up to 3 minutes"]
    spec = OpenRewardSpec(target, num_tasks=6)
    row = spec.train_dataset[2]
    lines = []
    factory = resilient_sessions(spec, out=lines.append)

    # later, rollouts opening their sessions while the Space sleeps again, longer than the SDK's ~3.5 s of retries
    proxy.wake_for(6.0)
    bare = spec.environment_factory()
    with pytest.raises(Exception, match="503|Exceeded"):   # the bare adapter: reset raises, GRPOTrainer stops
        bare.reset(**row)
    proxy.wake_for(6.0)
    env = factory()
    start = time.monotonic()
    assert play(env, row) == (str(true_answer(row)), "Correct.")
    assert time.monotonic() - start >= 5 and env.reward == 1.0
    assert lines == [f"environment at {proxy.url} is starting (503); retrying for up to 3 minutes"]
    stats = factory.stats.as_dict()
    assert (stats["rollouts"], stats["scored"], stats["failed"]) == (1, 1, 0) and stats["waited_s"] >= 3
    ors.stop()


@pytest.mark.parametrize("answer_offset", [0, 1], ids=["right", "wrong"])
def test_a_reply_lost_after_the_tool_ran_is_replayed_to_the_undisturbed_reward(spec, proxy, answer_offset):
    from calculator_env import true_answer

    row = spec.train_dataset[2]
    answer = true_answer(row) + answer_offset
    undisturbed = spec.environment_factory()
    expected = play(undisturbed, row, answer)
    expected_reward = undisturbed.reward
    assert expected_reward == (1.0 if answer_offset == 0 else 0.0)

    # the bare adapter: the SDK sends `answer` again on the same session, which refuses it; the grade is lost
    bare = spec.environment_factory()
    _, text = play(bare, row, answer, fault=lambda: proxy.cut_reply(CALL))
    assert "episode_finished" in text and bare.reward is None and not bare.finished

    TOTALS.clear()
    factory = resilient_sessions(spec)
    env = factory()
    cuts = proxy.stats["cut_replies"]
    assert play(env, row, answer, fault=lambda: proxy.cut_reply(CALL)) == expected
    assert proxy.stats["cut_replies"] == cuts + 1
    assert env.reward == expected_reward and env.finished and env.rewards == [None, expected_reward]
    stats = factory.stats.as_dict()
    assert (stats["rollouts"], stats["scored"], stats["retried"], stats["failed"]) == (1, 1, 1, 0)
    assert TOTALS.as_dict() == stats   # one wrapper here: the totals metrics.json records are its counts


def test_a_cut_after_the_first_event_is_resumed_by_the_sdk_itself(spec, proxy):
    row = spec.train_dataset[1]
    factory = resilient_sessions(spec)
    env = factory()
    undisturbed = play(spec.environment_factory(), row)
    assert play(env, row, fault=lambda: proxy.cut_reply(CALL, after_event="task_id")) == undisturbed
    assert proxy.stats["cut_replies"] == 1 and env.reward == 1.0
    assert factory.stats.retried == 0 and factory.stats.reconnects == 0   # nothing left for the wrapper to do


def test_a_session_lost_to_a_restarted_server_is_replayed_on_the_new_one(spec, proxy, servers):
    row = spec.train_dataset[4]
    bare = spec.environment_factory()
    _, text = play(bare, row, fault=lambda: proxy.switch_upstream(servers[1].url))
    assert "Active environment not found" in text and bare.reward is None
    proxy.switch_upstream(servers[0].url)

    factory = resilient_sessions(spec)
    env = factory()
    undisturbed = play(spec.environment_factory(), row)
    assert play(env, row, fault=lambda: proxy.switch_upstream(servers[1].url)) == undisturbed
    assert env.reward == 1.0 and env.rewards == [None, 1.0]
    stats = factory.stats.as_dict()
    assert (stats["rollouts"], stats["scored"], stats["retried"], stats["failed"]) == (1, 1, 1, 0)
    assert stats["reconnects"] >= 1


def test_an_episode_that_cannot_be_replayed_is_counted_failed_and_scored_zero(spec, proxy, servers):
    row = spec.train_dataset[2]
    TOTALS.clear()
    factory = resilient_sessions(spec, rule=NO_REPLAY)   # as for any environment RULES does not list
    env = factory()
    _, text = play(env, row, fault=lambda: proxy.switch_upstream(servers[1].url))
    assert "counted as failed and gets no reward" in text and "Active environment not found" in text
    assert env.reward == 0.0 and env.finished          # scored 0, never from the broken episode
    connections = proxy.stats["connections"]
    assert env.answer(answer="1") == text                # later calls: the reason, nothing sent
    assert proxy.stats["connections"] == connections
    stats = factory.stats.as_dict()
    assert (stats["rollouts"], stats["scored"], stats["failed"]) == (1, 0, 1)
    assert TOTALS.failed == 1
    # the next episode starts over, on the server now behind the URL
    assert play(env, row)[1] == "Correct." and env.reward == 1.0 and factory.stats.scored == 1

    # calculator_env's rule, but the replay answers differently from the first time: failed too
    factory = resilient_sessions(spec)
    env = factory()
    OPENED.append(env)
    env.reset(**row)
    env.calculate(expression=row["expression"])
    name, args, (blocks, reward, finished) = env._ors_journal[0]
    env._ors_journal[0] = (name, args, ((("text", "something else"),), reward, finished))
    proxy.switch_upstream(servers[0].url)
    assert "answered differently" in env.answer(answer="1")
    assert env.reward == 0.0 and factory.stats.failed == 1


def test_a_lost_create_reply_gets_a_new_session_instead_of_stopping_the_run(spec, proxy):
    row = spec.train_dataset[0]
    bare = spec.environment_factory()
    proxy.cut_reply("/create")     # the server made the session; the SDK sends /create again: 400
    with pytest.raises(Exception, match="Session already exists"):
        bare.reset(**row)
    factory = resilient_sessions(spec)
    env = factory()
    proxy.cut_reply("/create")
    assert play(env, row)[1] == "Correct." and env.reward == 1.0
    assert proxy.stats["cut_replies"] == 2
    stats = factory.stats.as_dict()
    assert (stats["rollouts"], stats["scored"], stats["reconnects"], stats["failed"]) == (1, 1, 1, 0)


def test_tiny_grpo_through_lost_replies_trains_its_steps_and_counts_every_episode(spec, proxy, tmp_path, monkeypatch):
    """A GRPOTrainer (`tiny-toolcall`, notebook 04's spec and reward cell, `resilient_sessions` as the notebook
    passes it) through the proxy, every 3rd /create reply cut after the server made the session: each of those
    would stop a bare run at its `reset` (400). It trains its steps, every rollout is counted, none failed, and
    metrics.json records the counts. (`tiny-toolcall` learned chain_sum's prompt and one tool: on calculator
    prompts its tool calls are not valid JSON, so the tool-call faults are the tests above.)"""
    from trl import GRPOConfig, GRPOTrainer

    from helpers.model_folders import resolve_model
    from helpers.profiles import resolve_settings
    from helpers.reporting.metrics import record_run
    from helpers.runs import load_metrics

    cell = load_cells(NOTEBOOKS_DIR / f"{NB}.ipynb", "reward-funcs", namespace={"spec": spec})
    for _ in range(4):
        proxy.cut_reply("/create", nth=3)
    TOTALS.clear()
    factory = resilient_sessions(spec)
    config = GRPOConfig(
        output_dir=str(tmp_path / "run"), max_steps=2, per_device_train_batch_size=4, num_generations=2,
        max_completion_length=32, learning_rate=1e-5, logging_steps=1, save_strategy="no", report_to="none",
        use_cpu=True, bf16=False, disable_tqdm=True, chat_template_kwargs={"enable_thinking": False},
        max_tool_calling_iterations=2, seed=0)

    def make():   # the factory, its adapters kept to close their sessions after the test
        OPENED.append(factory())
        return OPENED[-1]

    trainer = GRPOTrainer(model=resolve_model("tiny-toolcall"), train_dataset=spec.train_dataset, args=config,
                          environment_factory=make, reward_funcs=[cell["ors_reward_or_zero"]])
    start = time.monotonic()
    trainer.train()
    seconds = time.monotonic() - start
    assert trainer.state.global_step == 2

    stats = factory.stats.as_dict()
    cuts = proxy.stats["cut_replies"]
    assert cuts >= 2, proxy.stats
    assert stats["rollouts"] == 2 * 4 and stats["failed"] == 0 and stats["reconnects"] == cuts
    monkeypatch.setenv("AGENT_RL_RUNS", str(tmp_path / "runs"))
    record_run(NB, resolve_settings(NB, "tiny", quiet=True), trainer=trainer)
    assert load_metrics(NB)["env_episodes"] == TOTALS.as_dict() == stats
    print(f"GRPO 2 steps through {cuts} lost /create replies in {seconds:.1f} s: {stats} proxy {proxy.stats}")   # -rP
