"""helpers.servers.resilient against real local servers behind tests/fault_proxy.py: a Space waking (503 or
no answer), a full server (CAPACITY_REACHED, from the proxy and from the upstream stand-in's real one-session
limit), connections dropped mid-episode, latency; and a server gone for good still ending in a clear error."""

from __future__ import annotations

import threading
import time

import pytest

from fault_proxy import FaultProxy
from helpers.servers import LocalServer, ServerError, check_reachable, free_port
from helpers.servers.resilient import TOTALS, EnvironmentFull, EpisodeFailed, resilient
from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv

CHAIN = {"dataset_name": "chain_sum", "dataset_config": {"min_terms": 2, "max_terms": 2}, "size": 50}


@pytest.fixture(scope="module")
def rg(tmp_path_factory):
    with LocalServer("reasoning_gym_env.server.app:app", env={"MAX_CONCURRENT_ENVS": "8"}, name="reasoning_gym",
                     log_dir=tmp_path_factory.mktemp("logs")) as server:
        yield server


@pytest.fixture
def proxy(rg):
    with FaultProxy(rg.base_url) as p:
        yield p


def play(client, episodes: int, seed: int = 1) -> list:
    """Episodes on one dataset: (question, score) each; the answers are fixed, some right, most wrong."""
    out = []
    result = client.reset(seed=seed, **CHAIN)
    for i in range(episodes):
        if i:
            result = client.reset()
        question = result.observation.question
        step = client.step(ReasoningGymAction(answer=str(i % 10)))
        out.append((question, step.observation.score))
    return out


def test_a_waking_space_is_waited_for_with_one_announced_line(proxy):
    lines = []
    proxy.wake_for(2.0)
    client = resilient(ReasoningGymEnv, base_url=proxy.url, out=lines.append)
    start = time.monotonic()
    result = client.reset(seed=0, **CHAIN)
    assert result.observation.question and time.monotonic() - start >= 1.5
    assert lines == [f"environment at {proxy.url} is starting (503); retrying for up to 3 minutes"]
    assert proxy.stats["answered_503"] >= 2
    assert client.stats.retried == 1 and client.stats.waited_s > 1
    client.close()


def test_a_hanging_wake_is_waited_for_too(proxy):
    lines = []
    proxy.wake_hangs = True
    proxy.wake_for(2.5)
    client = resilient(ReasoningGymEnv, base_url=proxy.url, connect_timeout_s=1.0, out=lines.append)
    assert client.reset(seed=0, **CHAIN).observation.question
    assert lines == [f"environment at {proxy.url} is starting (no answer); retrying for up to 3 minutes"]
    client.close()


def test_a_space_that_never_wakes_is_a_clear_error(proxy):
    proxy.wake_for(60)
    client = resilient(ReasoningGymEnv, base_url=proxy.url, wake_timeout_s=1.5, out=lambda _: None)
    with pytest.raises(ConnectionError, match="still answers 503 after 2 s of retrying: the Space may be"):
        client.reset(seed=0, **CHAIN)


def test_a_full_server_is_waited_for_then_refused_with_the_capacity(proxy):
    lines = []
    proxy.full_for(1.5)
    client = resilient(ReasoningGymEnv, base_url=proxy.url, out=lines.append)
    assert client.reset(seed=0, **CHAIN).observation.question
    assert lines == [f"environment at {proxy.url} is full (4/4 sessions in use); waiting up to 1 minute "
                     f"for a session to free up"]
    assert proxy.stats["refused_full"] >= 2
    client.close()

    proxy.full_for(60)
    client = resilient(ReasoningGymEnv, base_url=proxy.url, capacity_timeout_s=1.0, out=lambda _: None)
    with pytest.raises(EnvironmentFull, match=r"is full: 4/4 sessions in use \(CAPACITY_REACHED\).*run fewer at "
                                              r"once.*MAX_CONCURRENT_ENVS.*duplicate the Space"):
        client.reset(seed=0, **CHAIN)


def test_drops_mid_episode_are_replayed_and_score_the_same(proxy, rg):
    direct = resilient(ReasoningGymEnv, base_url=rg.base_url)
    expected = play(direct, 12)
    direct.close()
    proxy.drop_every = 17
    proxy.latency, proxy.jitter = 0.005, 0.005
    TOTALS.clear()
    client = resilient(ReasoningGymEnv, base_url=proxy.url)
    assert play(client, 12) == expected          # same questions, same scores: nothing scored twice or lost
    assert proxy.stats["dropped"] >= 2
    assert client.stats.rollouts == 12 and client.stats.scored == 12 and client.stats.failed == 0
    assert client.stats.retried >= 2 and TOTALS.retried == client.stats.retried
    client.close()


def test_a_step_that_cannot_be_replayed_is_failed_not_scored(proxy):
    client = resilient(ReasoningGymEnv, base_url=proxy.url, max_replay=1)
    client.reset(seed=0, **CHAIN)
    client.reset()                                # the journal is now 2 calls: over max_replay
    proxy.drop_every = proxy.stats["frames"] + 1  # the next reply is dropped
    with pytest.raises(EpisodeFailed, match="counted as failed and gets no reward"):
        client.step(ReasoningGymAction(answer="1"))
    with pytest.raises(EpisodeFailed, match="already lost"):
        client.step(ReasoningGymAction(answer="1"))
    proxy.drop_every = 0
    assert client.reset().observation.question     # the next episode starts over (the dataset replayed)
    assert client.stats.failed == 1 and client.stats.scored == 0
    client.close()


def test_a_server_gone_for_good_is_still_a_clear_error():
    url = f"http://127.0.0.1:{free_port()}"
    client = resilient(ReasoningGymEnv, base_url=url, refused_timeout_s=1.0)
    start = time.monotonic()
    with pytest.raises(ConnectionError, match=f"reasoning_gym server at {url}: cannot connect.*gave up after"):
        client.reset(seed=0, **CHAIN)
    assert time.monotonic() - start < 5


def test_textarena_games_are_never_replayed(tmp_path):
    from textarena_env import TextArenaAction, TextArenaEnv

    with LocalServer("textarena_env.server.app:app", env={"MAX_CONCURRENT_ENVS": "4"}, name="textarena",
                     log_dir=tmp_path / "logs") as server, FaultProxy(server.base_url) as proxy:
        client = resilient(TextArenaEnv, base_url=proxy.url)
        client.reset(word="crane")
        client.step(TextArenaAction(message="[slate]"))
        proxy.drop_every = proxy.stats["frames"] + 1
        with pytest.raises(EpisodeFailed, match="a textarena step is not replayed"):
            client.step(TextArenaAction(message="[crane]"))
        proxy.drop_every = 0
        client.reset(word="crane")
        assert client.step(TextArenaAction(message="[crane]")).done
        assert client.stats.as_dict() | {"waited_s": 0} == {"rollouts": 2, "scored": 1, "retried": 0, "failed": 1,
                                                            "reconnects": 0, "restarted": 0, "waited_s": 0}
        client.close()

        # notebook 03's sessions and rollout: a game lost mid-way is counted failed and scores 0 on every stream
        from helpers import wordle
        from tools.notebooks import NOTEBOOKS_DIR, load_cells

        sessions = wordle.Sessions(proxy.url)
        lost, kept = sessions.take(2)
        lost.reset(word="crane")
        kept.reset(word="crane")
        proxy.drop_every = proxy.stats["frames"] + 1
        with pytest.raises(wordle.EpisodeFailed):
            lost.step(TextArenaAction(message="[slate]"))
        proxy.drop_every = 0
        won = kept.step(TextArenaAction(message="[crane]"))
        assert won.done and won.reward == 1.0
        assert sessions.stats["failed"] == 1 and sessions.stats["scored"] == 1
        sessions.close()
        rollout = load_cells(NOTEBOOKS_DIR / "03_wordle_rollout_func.ipynb", "rollout-func")["WordleRollout"](proxy.url)
        game = wordle.Game(seed=0, word="crane", prompt_ids=[], result=won, done=True)
        assert rollout.score(game)["streams"]["correct"] == 1.0      # a game the environment scored
        game.failed = True                                           # the same game, lost mid-way: nothing
        assert set(rollout.score(game)["streams"].values()) == {0.0}


def test_upstream_servers_one_session_capacity_is_waited_for(tmp_path):
    """The upstream stand-in refuses a 2nd session with the real server's CAPACITY_REACHED: the 2nd client waits
    and gets the session once the 1st closes; with no one closing it is refused naming 1/1."""
    with LocalServer("tests.upstream_apps:reasoning_gym_app", factory=True, name="upstream-reasoning-gym",
                     log_dir=tmp_path / "logs") as server:
        first = resilient(ReasoningGymEnv, base_url=server.base_url)
        first.reset(seed=0, **CHAIN)
        lines = []
        second = resilient(ReasoningGymEnv, base_url=server.base_url, capacity_timeout_s=1.0, out=lines.append)
        with pytest.raises(EnvironmentFull, match=r"1/1 sessions in use \(CAPACITY_REACHED\)"):
            second.reset(seed=0, **CHAIN)
        assert lines == [f"environment at {server.base_url} is full (1/1 sessions in use); waiting up to 1 s "
                         f"for a session to free up"]
        threading.Timer(1.0, first.close).start()
        third = resilient(ReasoningGymEnv, base_url=server.base_url, out=lambda _: None)
        assert third.reset(seed=0, **CHAIN).observation.question
        assert third.stats.retried == 1
        third.close()


def test_the_hosted_url_check_waits_for_a_waking_space_too(proxy):
    """check_reachable (server_or_url, notebook 01's ENV_BASE_URL check, an ORS target URL): HTTP through the proxy."""
    lines = []
    proxy.wake_for(1.5)
    check_reachable(proxy.url, out=lines.append)
    assert lines == [f"environment at {proxy.url} is starting (503); retrying for up to 3 minutes"]
    proxy.wake_for(60)
    with pytest.raises(ServerError, match="still answers 503 after 1 s of retrying: the Space may be failing"):
        check_reachable(proxy.url, wake_timeout_s=1.0, out=lambda _: None)


def test_the_upstream_server_behind_faults_is_ridden_through_the_same_way(tmp_path):
    """ENV_BASE_URL naming an upstream server (the contract tests' stand-in of OpenEnv's reasoning_gym server, one
    session at a time) behind a waking start and dropped connections: the same questions and scores as undisturbed,
    every episode scored, the drops replayed (the dropped session's slot is waited for where the server still holds it)."""
    with LocalServer("tests.upstream_apps:reasoning_gym_app", factory=True, name="upstream-reasoning-gym",
                     log_dir=tmp_path / "logs") as server:
        direct = resilient(ReasoningGymEnv, base_url=server.base_url)
        expected = play(direct, 10)
        direct.close()
        with FaultProxy(server.base_url) as proxy:
            proxy.wake_for(1.0)
            proxy.drop_every = 13
            lines = []
            client = resilient(ReasoningGymEnv, base_url=proxy.url, out=lines.append)
            assert play(client, 10) == expected
            assert proxy.stats["dropped"] >= 1 and proxy.stats["answered_503"] >= 1
            assert client.stats.scored == 10 and client.stats.failed == 0 and client.stats.retried >= 2
            assert lines[0] == f"environment at {proxy.url} is starting (503); retrying for up to 3 minutes"
            client.close()
