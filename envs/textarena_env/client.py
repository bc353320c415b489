"""Client of the TextArena environment (async; `.sync()` for blocking use, also inside Jupyter).

    with TextArenaEnv(base_url="http://127.0.0.1:8001").sync() as env:
        result = env.reset(seed=7)                     # same seed, same secret word
        print(result.observation.prompt)
        result = env.step(TextArenaAction(message="[crane]"))
        print(result.observation.last_message)         # "You submitted [crane]. Feedback: ..."
        print(result.observation.feedback, result.reward, result.done)

Server errors (a step before reset, a bad word=, a session over the server's capacity) are
raised as ``RuntimeError("Server error: ...")``.

Upstream OpenEnv's textarena_env server (the hosted Space) sends none of our board fields: its
transcript is one merged message (the LLM-wrapper text of the whole game), its ``prompt`` becomes
the game id after a step, it ignores ``seed``/``word`` and reveals no secret word. For Wordle this
client then derives the board from that transcript (``guesses``, ``feedback``, ``guesses_left``,
``last_message``, ``invalid_move``, ``won``), so code reading those fields works against either
server. A Wordle step reply that carries neither our fields nor a transcript it can read is an
error naming the server, never a silently empty board.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from .models import TextArenaAction, TextArenaMessage, TextArenaObservation, TextArenaState

_FIELDS = tuple(name for name in TextArenaObservation.model_fields if name not in ("reward", "done", "metadata"))
_SUBMITTED = re.compile(r"You submitted \[([A-Za-z]+)\]\.\s*Feedback:\s*\n[^\n]*\n([GYX ]+)")
_GUESSES_LEFT = re.compile(r"You have (\d+) guesses? left")
_BRACKETED = re.compile(r"\[(\w+)\]")  # how TextArena's Wordle reads a move: the first bracketed word
WORDLE_GUESSES = 6


def bracketed_guess(move: str) -> str:
    """The guess TextArena's Wordle reads from a move: the first word in square brackets, lowercase
    ("I think it is [image]" -> "image"), or "" when there is none."""
    found = _BRACKETED.search(move)
    return found.group(1).lower() if found else ""


class TextArenaEnv(EnvClient[TextArenaAction, TextArenaObservation, TextArenaState]):
    """One WebSocket session on a TextArena environment server."""

    _transcript = ""  # upstream servers: the merged transcript seen so far
    _wordle = False
    _last_move = ""

    def reset(self, seed: Optional[int] = None, word: Optional[str] = None, **kwargs: Any) -> Any:
        """Start a game.

        Args:
            seed: picks the secret word deterministically (Wordle; upstream's server ignores it).
            word: the secret word itself (Wordle; five letters), e.g. for tests and demos.
        """
        if seed is not None:
            kwargs["seed"] = seed
        if word is not None:
            kwargs["word"] = word
        return super().reset(**kwargs)

    async def _reset_async(self, **kwargs: Any) -> StepResult[TextArenaObservation]:
        self._transcript, self._wordle, self._last_move = "", False, ""
        return await super()._reset_async(**kwargs)

    def _step_payload(self, action: TextArenaAction) -> Dict[str, Any]:
        self._last_move = action.message
        return {"message": action.message}

    def _parse_result(self, payload: Dict[str, Any]) -> StepResult[TextArenaObservation]:
        data = payload.get("observation", {}) or {}
        fields = {k: data[k] for k in _FIELDS if k in data and data[k] is not None}
        fields["messages"] = [TextArenaMessage(sender_id=m.get("sender_id", -1), content=m.get("content", ""),
                                               category=m.get("category", "MESSAGE"))
                              for m in data.get("messages", []) or [] if isinstance(m, dict)]
        reward, done = payload.get("reward"), bool(payload.get("done", False))
        if "guesses" not in data:  # an upstream-shaped server: derive the board ourselves
            fields.update(self._derive_board(fields, reward, done))
        observation = TextArenaObservation(**fields, reward=reward, done=done)
        return StepResult(observation=observation, reward=reward, done=done)

    def _derive_board(self, fields: Dict[str, Any], reward: Any, done: bool) -> Dict[str, Any]:
        text = "\n".join(m.content for m in fields["messages"])
        if not self._last_move:  # a reset: remember the game and its transcript
            self._wordle = "Wordle" in text or "Wordle" in fields.get("prompt", "")
            self._transcript = text
            return {"guesses_left": WORDLE_GUESSES} if self._wordle else {}
        if not self._wordle:
            return {}
        new = text[len(self._transcript):] if text.startswith(self._transcript) else text
        self._transcript = text
        if not text.strip() or ("Feedback:" not in text and "[GAME]" not in text):
            raise RuntimeError(
                f"textarena server at {self._base_url} answered the move {self._last_move!r} with an "
                "observation that has neither our board fields (guesses, feedback) nor a Wordle "
                "transcript to read them from: cannot tell what the game said. Is it a TextArena "
                "Wordle server (upstream OpenEnv textarena_env, or ours)?")
        history = _SUBMITTED.findall(text)
        guesses = [w.lower() for w, _ in history]
        feedback = [f.replace(" ", "") for _, f in history]
        won = done and reward == 1.0
        if won:  # upstream's transcript has no feedback line for the winning guess
            guesses.append(bracketed_guess(self._last_move))
            feedback.append("G" * 5)
        replies = [line.removeprefix("[GAME]").strip() for line in new.splitlines()]
        replies = [r for r in replies if r and r != self._last_move.strip()
                   and not re.fullmatch(r"\[[A-Za-z]+\]", r)]
        left = _GUESSES_LEFT.findall(text)
        return {
            "guesses": guesses,
            "feedback": feedback,
            "guesses_left": int(left[-1]) if left and not won else max(WORDLE_GUESSES - len(guesses), 0),
            "last_message": "\n".join(replies),
            "invalid_move": "invalid move" in new.lower(),
            "won": won,
        }

    def _parse_state(self, payload: Dict[str, Any]) -> TextArenaState:
        known = {k: v for k, v in (payload or {}).items() if k in TextArenaState.model_fields and v is not None}
        return TextArenaState(**known)


__all__ = ["TextArenaEnv", "WORDLE_GUESSES", "bracketed_guess"]
