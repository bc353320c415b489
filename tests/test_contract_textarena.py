"""TextArena / Wordle wire contract with upstream OpenEnv (envs/textarena_env at commit 685de411),
both directions: our client against a stand-in upstream server (tests/upstream_apps.py: the real
textarena game behind upstream's observation shape: one merged transcript message, a prompt that
becomes the game id after a step, `info.reward_signals`, seed ignored), upstream-shaped frames fed
to our parser, and our server's frames against upstream's shape."""

from __future__ import annotations

import json

import pytest
from websockets.sync.client import connect

from helpers.servers import LocalServer
from helpers.wordle import feedback_counts
from textarena_env import TextArenaAction, TextArenaEnv

UPSTREAM_OBSERVATION_FIELDS = {"prompt": str, "messages": list, "current_player_id": int,
                               "legal_players": list, "info": dict}


@pytest.fixture(scope="module")
def upstream_wordle(tmp_path_factory):
    with LocalServer("tests.upstream_apps:textarena_app", factory=True, name="upstream-textarena",
                     log_dir=tmp_path_factory.mktemp("upstream-ta")) as server:
        yield server


@pytest.fixture(scope="module")
def wordle_server(tmp_path_factory):
    with LocalServer("textarena_env.server.app:app", env={"MAX_CONCURRENT_ENVS": "4"}, name="wordle",
                     log_dir=tmp_path_factory.mktemp("wordle")) as server:
        yield server


def test_our_client_reads_the_board_from_an_upstream_server(upstream_wordle):
    with TextArenaEnv(base_url=upstream_wordle.base_url).sync() as env:
        result = env.reset(word="crane")  # the stand-in's test hook; upstream itself picks at random
        assert "Wordle" in result.observation.prompt and result.observation.guesses_left == 6
        result = env.step(TextArenaAction(message="[stare]"))
        obs = result.observation
        assert obs.prompt == "Wordle-v0" and len(obs.messages) == 1  # upstream's shape, as received
        assert (obs.guesses, obs.feedback, obs.guesses_left) == (["stare"], ["XXGYG"], 5)
        assert "Feedback:" in obs.last_message and not obs.invalid_move
        signals = obs.info["reward_signals"]  # upstream's own streams agree with what we derived
        assert feedback_counts(obs.feedback) == (round(signals["wordle.greens"] * 5), round(signals["wordle.yellows"] * 5))
        obs = env.step(TextArenaAction(message="[stare]")).observation
        assert obs.invalid_move and "already guessed" in obs.last_message and obs.guesses == ["stare"]
        result = env.step(TextArenaAction(message="[crane]"))
        assert result.done and result.reward == 1.0 and result.observation.won
        assert result.observation.feedback[-1] == "GGGGG"


def test_a_step_reply_without_anything_to_read_is_an_error_naming_the_server():
    env = TextArenaEnv(base_url="http://upstream.example:8000")
    env._parse_result({"observation": {"prompt": "You are Playing Wordle.", "messages": [
        {"sender_id": -1, "content": "[GAME] You are Playing Wordle.", "category": "MESSAGE"}]},
        "reward": 0.0, "done": False})
    env._last_move = "[crane]"
    with pytest.raises(RuntimeError, match=r"upstream\.example:8000.*neither our board fields"):
        env._parse_result({"observation": {"prompt": "Wordle-v0", "messages": []}, "reward": 0.0, "done": False})


def test_our_server_sends_what_upstreams_client_accepts(wordle_server):
    url = wordle_server.base_url.replace("http://", "ws://") + "/ws"
    with connect(url) as ws:
        frames = []
        for message in ({"type": "reset", "data": {"word": "crane"}}, {"type": "step", "data": {"message": "[stare]"}},
                        {"type": "state"}):
            ws.send(json.dumps(message))
            frames.append(json.loads(ws.recv()))
    for frame in frames[:2]:
        observation = frame["data"]["observation"]
        for name, kind in UPSTREAM_OBSERVATION_FIELDS.items():
            assert isinstance(observation[name], kind), (name, observation.get(name))
        for m in observation["messages"]:
            assert isinstance(m["sender_id"], int) and isinstance(m["content"], str) and isinstance(m["category"], str)
    state = frames[2]["data"]  # upstream's client needs env_id and num_players
    assert state["env_id"] == "Wordle-v0" and state["num_players"] == 1


def test_a_huge_guess_is_refused_not_kept_in_the_transcript(wordle_server):
    from textarena_env.models import MAX_MESSAGE_CHARS

    url = wordle_server.base_url.replace("http://", "ws://") + "/ws"
    with connect(url, max_size=None) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"word": "crane"}}))
        ws.recv()
        ws.send(json.dumps({"type": "step", "data": {"message": "[" + "a" * (4 * 1024 * 1024) + "]"}}))
        refusal = json.loads(ws.recv())
        ws.send(json.dumps({"type": "step", "data": {"message": "[stare]"}}))
        reply = ws.recv()
    assert refusal["data"]["code"] == "VALIDATION_ERROR" and f"at most {MAX_MESSAGE_CHARS}" in json.dumps(refusal)
    assert len(reply) < 20_000 and json.loads(reply)["data"]["observation"]["feedback"] == ["XXGYG"]


# Upstream's server at 685de411 (envs/textarena_env/server/environment.py, `_snapshot_state` and the
# Wordle reward provider in rewards.py): what `state.raw_state` and `info.reward_signals` hold.
UPSTREAM_RAW_STATE_KEYS = {"turn", "game_state", "logs", "rewards", "done", "role_mapping", "game_info", "step_info"}
UPSTREAM_STATE_FIELDS = {"episode_id", "step_count", "env_id", "num_players", "max_turns", "turn", "last_reward",
                         "last_info", "raw_state"}
UPSTREAM_WORDLE_SIGNALS = {"wordle.greens", "wordle.yellows", "wordle.repetitions", "wordle.correct"}
# A repeated guess (refused), a new one, and a win written in free text around the bracketed word.
GAME = ["[stare]", "[stare]", "[slate]", "I think it is [crane]"]


def play(server, moves=GAME):
    url = server.base_url.replace("http://", "ws://") + "/ws"
    with connect(url) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"word": "crane"}}))
        ws.recv()
        steps = []
        for move in moves:
            ws.send(json.dumps({"type": "step", "data": {"message": move}}))
            steps.append(json.loads(ws.recv())["data"])
            ws.send(json.dumps({"type": "state"}))
            steps[-1]["state"] = json.loads(ws.recv())["data"]
    return steps


def test_our_server_sends_upstreams_reward_signals_with_upstreams_values(wordle_server, upstream_wordle):
    ours, theirs = play(wordle_server), play(upstream_wordle)
    for move, mine, upstream in zip(GAME, ours, theirs):
        signals = mine["observation"]["info"]["reward_signals"]
        assert set(signals) == UPSTREAM_WORDLE_SIGNALS, signals
        assert signals == pytest.approx(upstream["observation"]["info"]["reward_signals"]), move
    assert [s["observation"]["info"]["reward_signals"]["wordle.repetitions"] for s in ours] == [1.0, 0.0, 1.0, 1.0]
    assert ours[-1]["reward"] == 1.0 and ours[-1]["observation"]["info"]["reward_signals"]["wordle.correct"] == 1.0


def test_our_server_sends_upstreams_state_with_raw_state(wordle_server):
    steps = play(wordle_server)
    for i, step in enumerate(steps):
        state = step["state"]
        assert UPSTREAM_STATE_FIELDS <= set(state), sorted(state)
        raw = state["raw_state"]
        assert UPSTREAM_RAW_STATE_KEYS <= set(raw), sorted(raw)
        assert raw["reward_signals"] == step["observation"]["info"]["reward_signals"]
        assert state["last_info"]["reward_signals"] == raw["reward_signals"]
        assert [w for w, _ in raw["game_state"]["guess_history"]] == step["observation"]["guesses"]
        over = i == len(steps) - 1
        assert raw["done"] is over and raw["game_state"]["secret_word"] == ("crane" if over else None)


def test_our_client_reads_a_winning_move_in_free_text_as_the_server_does(upstream_wordle):
    """`"I think it is [crane]"` was recorded as the guess 'ithin' (the move's first five letters);
    the client now takes the bracketed word, as TextArena's Wordle does."""
    from textarena_env.client import bracketed_guess

    with TextArenaEnv(base_url=upstream_wordle.base_url).sync() as env:
        env.reset(word="crane")
        env.step(TextArenaAction(message="[stare]"))
        result = env.step(TextArenaAction(message="I think it is [crane]"))
    assert result.observation.won and result.observation.guesses == ["stare", "crane"]
    assert bracketed_guess("I think it is [Image] or [crane]") == "image" and bracketed_guess("crane") == ""
