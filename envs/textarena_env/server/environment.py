"""A TextArena game (Wordle-v0 by default) behind OpenEnv's `Environment` API.

Semantics:

- ``reset(seed=None, word=None)`` starts a game. For Wordle the secret word is ``word`` when
  given (five letters), else drawn from the word list with ``random.Random(seed)`` (same seed,
  same word; no seed: a random word). The observation carries the game's ``prompt``.
- ``step(TextArenaAction(message="[crane]"))`` plays one move, exactly as TextArena judges it:
  a valid guess gets letter feedback (G green, Y yellow, X absent) and uses a turn; an invalid one
  (no brackets, wrong length, not an English word, repeated) is refused with the reason and does
  not use a turn, but a second invalid move in a row ends the game. The game ends on a win
  (``reward=1.0``), after six guesses (``reward`` = the last guess's share of letters in place,
  yellows counting half: TextArena's partial credit), or on that second invalid move.
- Every observation carries the transcript (``messages``) and, as typed fields, the board
  (``guesses``, ``feedback``), ``last_message`` (the game's reply to the move), ``invalid_move``,
  ``won`` and, once over, ``secret_word``.

TextArena downloads NLTK data when imported; `use_offline_nltk()` runs first and serves it from a
local folder built out of textarena's own dictionaries, so nothing touches the network.
Building a Wordle game loads two dictionaries (about a second), so each process builds one
template game and every session plays on a light copy that shares the (read-only) word lists.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import random
import re
import threading
import uuid
from typing import Any, Optional

from openenv.core.env_server.interfaces import Environment

from ..models import TextArenaAction, TextArenaMessage, TextArenaObservation, TextArenaState
from ..offline_nltk import use_offline_nltk
from .wire_guard import quote

use_offline_nltk()  # before textarena is imported: it downloads NLTK data at import time

import textarena as ta  # noqa: E402

DEFAULT_ENV_ID = "Wordle-v0"
WORDLE_SIGNALS = ("wordle.greens", "wordle.yellows", "wordle.repetitions", "wordle.correct")
_BRACKETED_FIVE = re.compile(r"\[[A-Za-z]{5}\]")


class GameSetupError(ValueError):
    """A reset asked for something the game cannot start with; the message says what is valid."""
_TEMPLATE_LOCK = threading.Lock()


def env_id_from_env() -> str:
    """``TEXTARENA_ENV_ID`` (default Wordle-v0): which TextArena game the server plays."""
    return os.environ.get("TEXTARENA_ENV_ID", "").strip() or DEFAULT_ENV_ID


@functools.lru_cache(maxsize=None)
def _template(env_id: str):
    from textarena.envs.registration import ENV_REGISTRY

    if env_id not in ENV_REGISTRY:
        raise ValueError(f"Unknown TextArena game {env_id!r}; e.g. Wordle-v0, Wordle-v0-hardcore.")
    return ta.make(env_id=env_id)


def template_game(env_id: str):
    """The game built once per process (thread-safe); sessions copy it with `new_game`."""
    with _TEMPLATE_LOCK:
        return _template(env_id)


def new_game(env_id: str):
    """(wrapped game, inner game): a fresh game sharing the template's read-only word lists."""
    wrappers, inner = [], template_game(env_id)
    while isinstance(inner, ta.Wrapper):
        wrappers.append(type(inner))
        inner = inner.env
    inner = copy.copy(inner)
    game = inner
    for wrapper in reversed(wrappers):
        game = wrapper(game)
    return game, inner


def _messages(raw) -> list[TextArenaMessage]:
    return [
        TextArenaMessage(sender_id=int(sender), content=str(content), category=getattr(kind, "name", str(kind)))
        for sender, content, kind in raw
    ]


class TextArenaEnvironment(Environment):
    """One single-player TextArena game per session; Wordle by default."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, env_id: Optional[str] = None):
        super().__init__()
        self.env_id = env_id or env_id_from_env()
        self._game = self._inner = None
        self._transcript: list[TextArenaMessage] = []
        self._prompt = ""
        self._state = TextArenaState(env_id=self.env_id)
        self._guess_counts: dict[str, int] = {}  # Wordle: how often each guess was sent this episode

    # -- OpenEnv API -------------------------------------------------------------------------
    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None,
              word: Optional[str] = None, **kwargs: Any) -> TextArenaObservation:
        if kwargs:
            names = ", ".join(quote(k) for k in sorted(kwargs)[:10])
            raise GameSetupError(f"Unknown reset argument(s) {names}; TextArena takes seed= and word=.")
        self._game, self._inner = new_game(self.env_id)
        self._game.reset(num_players=1, seed=None)
        game_state = self._inner.state.game_state
        if "secret_word" in game_state:  # Wordle: pick the word ourselves (deterministic, thread-safe)
            game_state["secret_word"] = self._secret_word(seed, word, game_state["word_length"])
        elif word is not None:
            raise GameSetupError(f"word= only applies to Wordle, not {self.env_id}.")
        self._transcript = _messages(self._inner.get_observation()[1])
        self._prompt = "\n".join(m.content for m in self._transcript if m.category == "PROMPT").strip()
        self._state = TextArenaState(
            episode_id=episode_id or str(uuid.uuid4()), step_count=0, env_id=self.env_id,
            num_players=1, turn=0, seed=seed, done=False, last_reward=0.0,
        )
        self._guess_counts = {}
        self._state.raw_state = self._raw_state()
        return self._observation(new=self._transcript, reward=0.0, done=False, info={})

    def step(self, action: TextArenaAction, timeout_s: Optional[float] = None, **kwargs: Any) -> TextArenaObservation:
        if self._game is None:
            raise ValueError("No game in progress: call reset() before step().")
        if self._state.done:
            raise ValueError("This game is over: call reset() to start a new one.")
        done, info = self._game.step(action.message)
        new = _messages(self._inner.get_observation()[1])
        state = self._inner.state
        reward = 0.0
        if done:
            reward = float((state.rewards or {}).get(0, 0.0))
            reason = state.game_info.get(0, {}).get("reason")
            if reason:
                new.append(TextArenaMessage(sender_id=ta.GAME_ID, content=str(reason), category="GAME_ADMIN"))
        self._transcript.extend(new)
        self._state.step_count += 1
        self._state.turn = state.turn
        self._state.done = bool(done)
        self._state.last_reward = reward
        observation = self._observation(new=new, reward=reward, done=bool(done), info=info or {})
        signals = self._reward_signals(action.message, observation) if "secret_word" in state.game_state else {}
        if signals:
            observation.info["reward_signals"] = signals
        self._state.last_info = {**observation.info}
        self._state.raw_state = self._raw_state(signals)
        return observation

    @property
    def state(self) -> TextArenaState:
        return self._state

    # -- helpers ---------------------------------------------------------------------------------
    def _reward_signals(self, move: str, observation: TextArenaObservation) -> dict[str, float]:
        """Upstream OpenEnv's four Wordle streams for this step, computed the way its server does:
        greens/yellows / 5 of the latest feedback line in the transcript (a winning guess gets no
        feedback line, so there it is the previous guess's), repetitions = 1 - earlier sends of this
        guess (the bracketed five letters, else the move's first five letters), correct = the reward."""
        found = _BRACKETED_FIVE.search(move)
        letters = re.sub(r"[^a-z]", "", move.lower())
        guess = found.group(0).lower() if found else (f"[{letters[:5]}]" if len(letters) >= 5 else "")
        earlier = self._guess_counts.get(guess, 0) if guess else 0
        if guess:
            self._guess_counts[guess] = earlier + 1
        lines = (line.replace(" ", "") for m in reversed(self._transcript) if "Feedback:" in m.content
                 for line in reversed(m.content.splitlines()))
        last = next((line for line in lines if len(line) == 5 and set(line) <= set("GYX")), "")
        values = (last.count("G") / 5, last.count("Y") / 5, 1.0 - earlier, float(observation.reward or 0.0))
        return dict(zip(WORDLE_SIGNALS, values))

    def _raw_state(self, signals: Optional[dict] = None) -> dict[str, Any]:
        """TextArena's own state, as upstream sends it in ``state.raw_state`` (JSON-safe). The secret
        word stays out until the game is over, as in the observation."""
        state = self._inner.state
        game_state = dict(state.game_state or {})
        if "secret_word" in game_state and not state.done:
            game_state["secret_word"] = None
        raw = {"turn": state.turn, "game_state": game_state, "logs": list(state.logs or []),
               "rewards": state.rewards, "done": bool(state.done), "role_mapping": dict(state.role_mapping or {}),
               "game_info": dict(state.game_info or {}), "step_info": dict(getattr(state, "step_info", {}) or {})}
        if signals:
            raw["reward_signals"] = dict(signals)
        return json.loads(json.dumps(raw, default=str))
    def _secret_word(self, seed: Optional[int], word: Optional[str], length: int) -> str:
        if word is not None:
            word = str(word).strip().lower()
            if not re.fullmatch(rf"[a-z]{{{length}}}", word):
                raise GameSetupError(f"word= must be {length} letters a-z, got {quote(word)}.")
            return word
        words = sorted(self._inner.word_list)
        rng = random.Random(seed) if seed is not None else random.SystemRandom()
        return rng.choice(words)

    def _observation(self, *, new: list[TextArenaMessage], reward: float, done: bool,
                     info: dict) -> TextArenaObservation:
        state = self._inner.state
        game_state = state.game_state or {}
        history = game_state.get("guess_history", [])
        guesses = [w for w, _ in history]
        feedback = ["".join(f) for _, f in history]
        replies = [m.content.strip() for m in new if m.category not in ("PLAYER_ACTION", "PROMPT")]
        invalid = bool(state.game_info.get(0, {}).get("invalid_move")) or any(
            m.category == "GAME_ADMIN" and "invalid move" in m.content.lower() for m in new)
        won = bool(done and feedback and set(feedback[-1]) == {"G"})
        num_guesses = game_state.get("num_guesses")
        return TextArenaObservation(
            prompt=self._prompt,
            messages=list(self._transcript),
            last_message="\n".join(r for r in replies if r),
            current_player_id=state.current_player_id,
            legal_players=sorted(p for p in (state.role_mapping or {}) if isinstance(p, int) and p >= 0),
            info={k: v for k, v in info.items() if isinstance(v, (str, int, float, bool))},
            guesses=guesses,
            feedback=feedback,
            guesses_left=None if num_guesses is None else max(num_guesses - len(history), 0),
            invalid_move=invalid,
            won=won,
            secret_word=game_state.get("secret_word") if done else None,
            reward=reward,
            done=done,
        )
