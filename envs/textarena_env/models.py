"""Typed wire models of the TextArena environment (Wordle-v0 by default).

They follow the upstream OpenEnv `textarena_env` that the seeds install from a Space, so code
written against it (`TextArenaAction(message=...)`, `observation.prompt`, `observation.messages`)
runs unchanged here. Additions, all typed fields because upstream OpenEnv's server strips
`Observation.metadata` from the wire (openenv 0.10.0, pinned here, keeps it):

- `last_message`: what the game said in reply to the last action (feedback, an invalid-move
  reason, or the outcome): exactly what a player reads before the next guess.
- Wordle's board: `guesses` and `feedback` (one "XGYXX" string per accepted guess), plus
  `guesses_left`, `invalid_move`, `won`, and `secret_word` (revealed only once the game is over).

Like upstream's server, a Wordle step's `info.reward_signals` holds its four streams
(`wordle.greens`, `wordle.yellows`, `wordle.repetitions`, `wordle.correct`) and the state carries
`last_info` and `raw_state` (TextArena's own state; the secret word in it only once the game is over).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from openenv.core.env_server.types import Action, Observation, State
from pydantic import BaseModel, Field


class TextArenaMessage(BaseModel):
    """One message of the game transcript."""

    sender_id: int = Field(..., description="-1 for the game, else the player id.")
    content: str = Field(..., description="The text.")
    category: str = Field(
        ..., description="TextArena's ObservationType name: PROMPT, PLAYER_ACTION, GAME_MESSAGE, GAME_ADMIN, ..."
    )


#: Longest move a server takes: the transcript keeps every move and each reply carries it, so a
#: 16 MB guess would make every later reply 16 MB.
MAX_MESSAGE_CHARS = 2_000


class TextArenaAction(Action):
    """What the player says; for Wordle a guess in square brackets, e.g. "[crane]"."""

    message: str = Field(..., max_length=MAX_MESSAGE_CHARS, description="The player's move as text.")


class TextArenaObservation(Observation):
    """The game as the player sees it after reset or after a step."""

    prompt: str = Field(default="", description="The game's instructions (fixed for an episode).")
    messages: List[TextArenaMessage] = Field(
        default_factory=list, description="The whole transcript of the episode so far."
    )
    last_message: str = Field(default="", description="The game's reply to the last action.")
    current_player_id: int = Field(default=0, description="Whose turn it is.")
    legal_players: List[int] = Field(default_factory=list, description="Player ids in the game.")
    info: Dict[str, Any] = Field(default_factory=dict, description="TextArena's step info.")
    guesses: List[str] = Field(default_factory=list, description="Wordle: accepted guesses, lowercase.")
    feedback: List[str] = Field(
        default_factory=list, description="Wordle: one 'G'/'Y'/'X' string per accepted guess."
    )
    guesses_left: Optional[int] = Field(default=None, description="Wordle: guesses remaining.")
    invalid_move: bool = Field(default=False, description="The last action was refused (and not counted).")
    won: bool = Field(default=False, description="Wordle: the secret word was guessed.")
    secret_word: Optional[str] = Field(default=None, description="Wordle: revealed once the game is over.")


class TextArenaState(State):
    """Server-side state of one session (`episode_id`, `step_count` come from the base)."""

    env_id: str = Field(default="Wordle-v0", description="The TextArena game served.")
    num_players: int = Field(default=1, description="Players in the game.")
    turn: int = Field(default=0, description="TextArena's turn counter (invalid moves do not count).")
    seed: Optional[int] = Field(default=None, description="The seed of the current episode, if given.")
    done: bool = Field(default=False, description="Whether the current episode is over.")
    last_reward: float = Field(default=0.0, description="Reward of the last step.")
    max_turns: Optional[int] = Field(default=None, description="Upstream's turn cap; None: the game's own.")
    last_info: Dict[str, Any] = Field(default_factory=dict, description="The last step's info (with reward_signals).")
    raw_state: Dict[str, Any] = Field(
        default_factory=dict, description="TextArena's state as upstream sends it (secret word only once over).")


__all__ = ["MAX_MESSAGE_CHARS", "TextArenaAction", "TextArenaMessage", "TextArenaObservation", "TextArenaState"]
