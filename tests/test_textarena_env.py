"""The TextArena Wordle environment, served locally and played over real WebSocket sessions."""

from __future__ import annotations

import os

import pytest

from helpers.servers import LocalServer


@pytest.fixture(scope="module")
def wordle_server(tmp_path_factory):
    with LocalServer("textarena_env.server.app:app", env={"MAX_CONCURRENT_ENVS": "4"},
                     name="textarena", log_dir=tmp_path_factory.mktemp("logs")) as server:
        yield server


@pytest.fixture
def env(wordle_server):
    from textarena_env import TextArenaEnv

    with TextArenaEnv(base_url=wordle_server.base_url).sync() as client:
        yield client


def guess(env, message):
    from textarena_env import TextArenaAction

    return env.step(TextArenaAction(message=message))


def test_offline_nltk_folder_is_built_from_textarena_and_blocks_downloads():
    import nltk

    from textarena_env.offline_nltk import OfflineNLTKError, use_offline_nltk

    root = use_offline_nltk()
    assert os.environ["NLTK_DATA"].split(os.pathsep)[0] == str(root)  # child processes find it too
    basic = (root / "corpora" / "words" / "en-basic").read_text().split()
    everything = set((root / "corpora" / "words" / "en").read_text().split())
    assert len(basic) > 1000 and all(len(w) == 5 and w.isalpha() and w.islower() for w in basic)
    assert {"crane", "apple", "house"} <= everything and set(basic) <= everything
    assert nltk.download("words") is True  # present locally: no network involved
    assert nltk.pos_tag(["crane"]) == [("crane", "NN")]
    with pytest.raises(OfflineNLTKError, match="offline"):
        nltk.download("punkt")


def test_reset_shows_the_game_prompt(env):
    result = env.reset(seed=1)
    obs = result.observation
    assert "Wordle" in obs.prompt and "square brackets" in obs.prompt
    assert not result.done and result.reward == 0.0
    assert obs.guesses == [] and obs.guesses_left == 6 and obs.secret_word is None
    assert [m.category for m in obs.messages] == ["PROMPT"]


def test_right_word_wins(env):
    env.reset(word="crane")
    result = guess(env, "[crane]")
    obs = result.observation
    assert result.done and result.reward == 1.0 and obs.won
    assert obs.feedback == ["GGGGG"] and obs.secret_word == "crane"
    assert "Congratulations" in obs.last_message


def test_multi_turn_game_gives_feedback_then_wins(env):
    env.reset(word="crane")
    result = guess(env, "[slate]")
    obs = result.observation
    assert not result.done and result.reward == 0.0
    assert obs.feedback == ["XXGXG"]  # a and e in place, s l t absent
    assert "Feedback" in obs.last_message and "S L A T E" in obs.last_message
    assert obs.guesses_left == 5 and obs.secret_word is None

    result = guess(env, "[brace]")  # r a c e all in the word; c is misplaced
    assert result.observation.feedback[-1] == "XGGYG"

    result = guess(env, "[CRANE]")  # case does not matter to the game
    obs = result.observation
    assert result.done and obs.won and result.reward == 1.0
    assert obs.guesses == ["slate", "brace", "crane"]
    assert [m.category for m in obs.messages].count("PLAYER_ACTION") == 3


def test_invalid_guesses_are_refused_with_reasons_without_using_a_turn(env):
    env.reset(word="crane")
    result = guess(env, "my guess is slate")  # no brackets: the game's format complaint
    obs = result.observation
    assert obs.invalid_move and not result.done
    assert "invalid move" in obs.last_message.lower() and obs.guesses_left == 6

    result = guess(env, "[plant]")  # a valid move resets the error allowance
    assert not result.observation.invalid_move and result.observation.guesses_left == 5

    result = guess(env, "[plant]")  # repeated
    assert result.observation.invalid_move and "already guessed" in result.observation.last_message
    result = guess(env, "[zzzzq]")  # second invalid move in a row ends the game
    obs = result.observation
    assert result.done and obs.invalid_move and not obs.won
    assert "not an English word" in obs.last_message and obs.secret_word == "crane"
    assert 0.0 <= result.reward < 1.0


def test_six_wrong_guesses_lose_with_partial_credit(env):
    env.reset(word="crane")
    for word in ["plant", "slate", "house", "mouse", "light", "brace"]:
        result = guess(env, f"[{word}]")
    obs = result.observation
    assert result.done and not obs.won and obs.guesses_left == 0
    assert obs.secret_word == "crane" and "crane" in obs.last_message
    assert obs.feedback[-1] == "XGGYG"  # brace: r a e in place, c elsewhere
    assert result.reward == pytest.approx((3 + 0.5) / 5)  # TextArena: greens + half the yellows


def test_same_seed_same_word_and_sessions_are_independent(wordle_server, env):
    from textarena_env import TextArenaEnv

    def secret(client, seed):
        client.reset(seed=seed)
        guess(client, "[xx]")
        return guess(client, "[yy]").observation.secret_word  # two invalid moves end the game

    with TextArenaEnv(base_url=wordle_server.base_url).sync() as other:
        assert secret(env, 7) == secret(other, 7)
        other.reset(word="crane")
        env.reset(word="house")
        assert guess(other, "[crane]").observation.won
        assert not guess(env, "[crane]").observation.won
    assert len({secret(env, s) for s in range(5)}) > 1


def test_errors_name_the_problem(env):
    env.reset(word="crane")
    guess(env, "[crane]")
    with pytest.raises(RuntimeError, match="game is over"):
        guess(env, "[crane]")
    with pytest.raises(RuntimeError, match="5 letters"):
        env.reset(word="toolong")
    env.reset(seed=0)  # the session is still usable


def test_a_bad_http_reset_is_a_400_naming_the_argument_not_a_500(wordle_server):
    import httpx

    unknown = httpx.post(wordle_server.base_url + "/reset", json={"colour": "red"}, timeout=30)
    word = httpx.post(wordle_server.base_url + "/reset", json={"word": "w" * 1_000_000}, timeout=30)
    assert unknown.status_code == 400 and "'colour'" in unknown.json()["detail"], unknown.text
    assert word.status_code == 400 and "5 letters" in word.json()["detail"], word.text[:300]
    assert "(1,000,000 characters)" in word.json()["detail"] and len(word.text) < 500
