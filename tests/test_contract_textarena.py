"""TextArena / Wordle wire contract with upstream OpenEnv (envs/textarena_env of huggingface/OpenEnv, read
at commits 685de411 and 385de5eb: the wire did not change between them), both directions: our client
against a stand-in upstream server (tests/upstream_apps.py: the real textarena game behind upstream's
observation shape: one merged transcript message, a prompt that becomes the game id after a step,
`info.reward_signals`, seed ignored), upstream-shaped frames fed to our parser, and our server's frames
against upstream's shape. Opt-in, with OPENENV_UPSTREAM naming checkouts of huggingface/OpenEnv:
upstream's own server and client from each checkout, both ways."""

from __future__ import annotations

import json

import pytest
from websockets.sync.client import connect

from helpers.servers import LocalServer
from helpers.wordle import feedback_counts
from textarena_env import TextArenaAction, TextArenaEnv
from upstream_apps import run_upstream_client, snapshot_env, snapshot_params, snapshot_server_app

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


# -- upstream's own code, from checkouts named by OPENENV_UPSTREAM (skipped when unset) ----------------

UPSTREAM_CLIENT_GAME = """
import json, os
import textarena_env
from textarena_env import TextArenaAction, TextArenaEnv
out = {"module": textarena_env.__file__, "steps": []}
with TextArenaEnv(base_url=os.environ["BASE_URL"]).sync() as env:
    r = env.reset(word="crane")
    out["reset"] = [r.observation.prompt, len(r.observation.messages), r.reward, r.done]
    for move in ["[stare]", "[stare]", "[slate]", "I think it is [crane]"]:
        r = env.step(TextArenaAction(message=move))
        o = r.observation
        out["steps"].append({"prompt": o.prompt, "messages": [[m.sender_id, m.category, len(m.content)] for m in o.messages],
                             "signals": o.info.get("reward_signals"), "reward": r.reward, "done": r.done})
    s = env.state()
    out["state"] = [s.env_id, s.num_players, s.turn, sorted(s.raw_state), s.last_info.get("reward_signals")]
print(json.dumps(out))
"""


@pytest.fixture(scope="module", params=snapshot_params())
def snapshot(request):
    return request.param


@pytest.fixture(scope="module")
def real_upstream_wordle(snapshot, tmp_path_factory):
    with LocalServer(snapshot_server_app("textarena_env"), factory=True, env=snapshot_env(snapshot),
                     name="real-upstream-ta", log_dir=tmp_path_factory.mktemp("real-upstream-ta")) as server:
        yield server


def _secret(env) -> str:
    """Upstream sends TextArena's game state, secret word included, from the start of a game."""
    return env.state().raw_state["game_state"]["secret_word"]


def test_our_client_reads_the_board_from_upstreams_own_server(real_upstream_wordle):
    with TextArenaEnv(base_url=real_upstream_wordle.base_url).sync() as env:
        result = env.reset()
        assert "Wordle" in result.observation.prompt and result.observation.guesses_left == 6
        secret = _secret(env)
        first = "stare" if secret != "stare" else "slate"
        obs = env.step(TextArenaAction(message=f"[{first}]")).observation
        assert obs.prompt == "Wordle-v0" and len(obs.messages) == 1  # upstream's shape, as received
        assert obs.guesses == [first] and len(obs.feedback) == 1 and obs.guesses_left == 5
        assert len(obs.feedback[0]) == 5 and set(obs.feedback[0]) <= set("GYX")
        signals = obs.info["reward_signals"]  # upstream's own streams agree with what we derived
        assert feedback_counts(obs.feedback) == (round(signals["wordle.greens"] * 5), round(signals["wordle.yellows"] * 5))
        obs = env.step(TextArenaAction(message=f"[{first}]")).observation
        assert obs.invalid_move and obs.guesses == [first]
        result = env.step(TextArenaAction(message=f"I think it is [{secret}]"))
        assert result.done and result.reward == 1.0 and result.observation.won
        assert result.observation.guesses == [first, secret] and result.observation.feedback[-1] == "GGGGG"


def test_our_server_sends_the_reward_signals_upstreams_own_server_sends(real_upstream_wordle, wordle_server):
    """The same game (upstream's random word, read from its state) on upstream's server and on ours."""
    url = real_upstream_wordle.base_url.replace("http://", "ws://") + "/ws"
    with connect(url) as ws:
        ws.send(json.dumps({"type": "reset", "data": {}}))
        ws.recv()
        ws.send(json.dumps({"type": "state"}))
        secret = json.loads(ws.recv())["data"]["raw_state"]["game_state"]["secret_word"]
        first, second = [w for w in ("stare", "slate", "crane") if w != secret][:2]
        moves = [f"[{first}]", f"[{first}]", f"[{second}]", f"I think it is [{secret}]"]
        theirs = []
        for move in moves:
            ws.send(json.dumps({"type": "step", "data": {"message": move}}))
            theirs.append(json.loads(ws.recv())["data"])
    url = wordle_server.base_url.replace("http://", "ws://") + "/ws"
    with connect(url) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"word": secret}}))
        ws.recv()
        ours = []
        for move in moves:
            ws.send(json.dumps({"type": "step", "data": {"message": move}}))
            ours.append(json.loads(ws.recv())["data"])
    for move, mine, upstream in zip(moves, ours, theirs):
        assert set(upstream["observation"]["info"]["reward_signals"]) == UPSTREAM_WORDLE_SIGNALS
        assert mine["observation"]["info"]["reward_signals"] == pytest.approx(
            upstream["observation"]["info"]["reward_signals"]), move
        assert (mine["reward"], mine["done"]) == (upstream["reward"], upstream["done"]), move
    assert theirs[-1]["reward"] == 1.0 and theirs[-1]["done"]


def test_upstreams_own_client_plays_on_our_server(snapshot, wordle_server):
    out = run_upstream_client(snapshot, UPSTREAM_CLIENT_GAME, wordle_server.base_url)
    assert out["module"].startswith(str(snapshot))  # upstream's client, not ours
    prompt, messages, reward, done = out["reset"]
    assert "Wordle" in prompt and messages >= 1 and reward == 0.0 and done is False
    signals = [step["signals"] for step in out["steps"]]
    assert all(set(s) == UPSTREAM_WORDLE_SIGNALS for s in signals)
    assert [s["wordle.repetitions"] for s in signals] == [1.0, 0.0, 1.0, 1.0]
    assert out["steps"][-1]["done"] and out["steps"][-1]["reward"] == 1.0
    assert all(isinstance(m[0], int) and isinstance(m[1], str) for step in out["steps"] for m in step["messages"])
    env_id, players, turn, raw_keys, last_signals = out["state"]
    assert (env_id, players) == ("Wordle-v0", 1) and UPSTREAM_RAW_STATE_KEYS <= set(raw_keys)
    assert last_signals == signals[-1]
