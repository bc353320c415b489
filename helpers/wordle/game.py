"""Wordle machinery for notebook 03's multi-turn `rollout_func`: guess parsing, feedback, scoring, sessions.

The rollout itself (the turn loop) and its four reward functions are notebook cells (tagged "rollout-func" and
"reward-funcs"), so a learner reads and edits them there. What they lean on lives here:

- `extract_guess` / `guess_message`: the guess in a small model's reply, and what to send the game;
- `feedback_pattern` / `is_consistent`: TextArena's feedback row, and whether a word fits the rows so far;
- `Move`, `Game`: one judged move, one game being played (its tokens, moves and last StepResult);
- `game_skills`: what a game shows (the held-out evaluation's measures); `turn_rewards`: the valid / consistent /
  letters reward streams, each in [0, 1]; valid and consistent are counted over the game's `max_turns` turns (not
  over the moves played): a game cut short by a second invalid move in a row scores 0 for the turns it never
  played, and a won game keeps full marks for the turns it did not need; letters is per accepted guess;
- `Sessions`: WebSocket sessions to the TextArena server, kept open across steps;
- `game_record` / `summarize`: one finished game's record for metrics, and the metrics over a run's games.

(TRL's original Wordle example rewards the last feedback's greens and yellows and non-repetition; a game's last
row says little about the moves before it, and a repeat is already an invalid move.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from helpers.prompts import WORDLE_SYSTEM_PROMPT
from helpers.servers.resilient import EpisodeFailed, resilient  # noqa: F401 - a game whose session dropped

SYSTEM_PROMPT = WORDLE_SYSTEM_PROMPT   # helpers.prompts holds every system prompt

DATASET_PROMPT = "Play Wordle like an expert."  # the original script's prompt; each row of the dataset is one game

_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
BRACKETED_WORD = re.compile(r"\[\s*([A-Za-z]{5})\s*\]")   # "[crane]", "[ CRANE ]"
_BRACKETED_ANY = re.compile(r"\[([^\[\]]{1,40})\]")
_FIVE_LETTERS = re.compile(r"(?<![A-Za-z])([A-Za-z]{5})(?![A-Za-z])")
# Five-letter words small models wrap around a guess ("My first guess is ...").
_FILLER = {"guess", "think", "maybe", "first", "start", "words", "which", "there", "their", "about",
           "could", "would", "might", "again", "after", "final", "green", "reply", "since", "start",
           "right", "wrong", "spots", "these", "those", "other", "every", "enter", "brack"}


def extract_guess(text: str) -> str | None:
    """The five-letter guess in a model's reply, lowercase, or None when there is none.

    Tolerant of what small models write: "[crane]", "[ CRANE ]", "[c-r-a-n-e]", "**CRANE**",
    "My guess is crane." Order of preference: a bracketed five-letter word; any bracketed text
    with exactly five letters; an all-caps five-letter word; the first five-letter word that is
    not filler ("guess", "think", ...). Thinking blocks are ignored.
    """
    text = _THINK.sub(" ", text or "")
    match = BRACKETED_WORD.search(text)
    if match:
        return match.group(1).lower()
    for inside in _BRACKETED_ANY.findall(text):
        letters = re.sub(r"[^A-Za-z]", "", inside)
        if len(letters) == 5:
            return letters.lower()
    words = _FIVE_LETTERS.findall(text)
    for word in words:
        if word.isupper():
            return word.lower()
    for word in words:
        if word.lower() not in _FILLER:
            return word.lower()
    return None


def guess_message(text: str) -> str:
    """What to send the game: "[guess]" when a guess was found, else the reply itself (trimmed),
    so the game answers with its own complaint, as it would to a human player."""
    guess = extract_guess(text)
    if guess:
        return f"[{guess}]"
    return (text or "").strip()[:200] or "(no guess)"


def feedback_counts(feedback: list[str]) -> tuple[int, int]:
    """(greens, yellows) in the last feedback row, e.g. ["XGYXX"] -> (1, 1); (0, 0) before any."""
    if not feedback:
        return 0, 0
    return feedback[-1].count("G"), feedback[-1].count("Y")


def check_words(words: list[str], what: str) -> None:
    """Refuse secret words the Wordle server cannot play (it takes five letters a-z), naming them."""
    bad = [w for w in words if not (isinstance(w, str) and len(w) == 5 and w.isascii() and w.isalpha())]
    if bad:
        raise ValueError(f"The Wordle server plays five-letter words a-z; {len(bad)} {what} word(s) are not "
                         f"({', '.join(repr(w)[:20] for w in bad[:3])}): build the lists with "
                         "helpers.wordle.evaluation.split_words(wordle_words(), n).")


def feedback_pattern(guess: str, secret: str) -> str:
    """The feedback row TextArena gives `guess` against `secret`, e.g. ("slate", "crane") -> "XXGXG".

    TextArena's two passes: greens first, then each other letter is yellow while unmatched copies of
    it remain in the secret, else grey (so a doubled letter is yellow only as often as it occurs)."""
    left = [s if g != s else None for g, s in zip(guess, secret)]
    row = []
    for g, s in zip(guess, secret):
        if g == s:
            row.append("G")
        elif g in left:
            row.append("Y")
            left[left.index(g)] = None
        else:
            row.append("X")
    return "".join(row)


def is_consistent(word: str, history: list[tuple[str, str]]) -> bool:
    """Could `word` still be the secret after the (guess, feedback) rows of `history`?"""
    return all(feedback_pattern(guess, word) == row for guess, row in history)


@dataclass
class Move:
    """One move of a game as the environment judged it."""

    guess: str | None          # the five-letter word read from the reply (None: none found)
    valid: bool                # the game accepted it (a real, new five-letter word in brackets)
    feedback: str | None       # its row, e.g. "XGYXX" ("GGGGG" for the winning move); None when refused
    consistent: bool           # valid, and it could still have been the secret given the earlier rows


def game_skills(moves: list[Move], won: bool) -> dict:
    """What one game shows about the player, each in [0, 1] except `greens_yellows` (0-5) and `turns`:
    valid (share of moves accepted), consistent (share of the moves made after the first feedback that
    could still be the secret; a game with no such move counts 1 if won at once, else 0), letters
    (greens + yellows per accepted guess / 5), turns (moves played)."""
    valid = [m for m in moves if m.valid]
    first_row = next((i for i, m in enumerate(moves) if m.feedback), None)
    later = moves[first_row + 1:] if first_row is not None else []
    if later:
        consistent = sum(m.consistent for m in later) / len(later)
    else:
        consistent = 1.0 if won and len(moves) == 1 else 0.0
    greens_yellows = (sum(5 - m.feedback.count("X") for m in valid) / len(valid)) if valid else 0.0
    return {"valid": len(valid) / len(moves) if moves else 0.0, "consistent": consistent,
            "letters": greens_yellows / 5, "greens_yellows": greens_yellows, "turns": len(moves), "won": bool(won)}


def turn_rewards(moves: list[Move], won: bool, max_turns: int) -> dict:
    """The valid / consistent / letters reward streams of one game. Valid and consistent are averaged over its
    `max_turns` turns: turns a game never played (it ended on a second invalid move) count 0, turns a won game did
    not need count 1 (averaging over the moves played rewarded cutting a game short after one good guess: a
    measured GRPO run learned exactly that, docs/measurements.md#notebook-03). Letters, greens + yellows / 5, is
    per accepted guess: the valid stream already pays for playing on, this one for playing better words."""
    spare = max(0, max_turns - len(moves)) if won else 0
    first_row = next((i for i, m in enumerate(moves) if m.feedback), None)
    after_first = max_turns - 1 - first_row if first_row is not None else 0
    consistent = ((sum(m.consistent for m in moves[first_row + 1:]) + spare) / after_first
                  if after_first > 0 else float(won))
    accepted = [m for m in moves if m.valid]
    return {
        "valid": min(1.0, (sum(m.valid for m in moves) + spare) / max_turns),
        "consistent": min(1.0, consistent),
        # per accepted guess, as the held-out measure: per turn, GRPO lengthened games (docs/measurements.md#notebook-03)
        "letters": sum((5 - m.feedback.count("X")) / 5 for m in accepted) / len(accepted) if accepted else 0.0,
    }


@dataclass
class Game:
    """One game while it is played: its tokens as the rollout lays them out (`completion_ids` holds the model's
    replies and the game's feedback turns, `env_mask` says which is which) and its judged moves."""

    seed: int
    word: str | None           # the secret word asked for (None: the server drew it from the seed)
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    done: bool = False
    result: object = None      # the last StepResult
    failed: bool = False       # its session dropped mid-game (EpisodeFailed): counted, given no reward

    def judge(self, reply: str, observation) -> None:
        """Record the move the game just judged (its reply to `reply` is `observation`)."""
        guess = extract_guess(reply)
        valid = not observation.invalid_move and guess is not None
        if valid and observation.won:
            row = "G" * len(guess)
        else:
            row = observation.feedback[-1] if valid and observation.feedback else None
        history = [(m.guess, m.feedback) for m in self.moves if m.feedback]
        self.moves.append(Move(guess=guess, valid=valid, feedback=row,
                               consistent=valid and is_consistent(guess, history)))


def training_words(words: list[str] | None) -> list[str] | None:
    """The secret words a rollout draws from, sorted (None: the server draws from the seed); refuses an empty
    list or a word the server cannot play."""
    if words is None:
        return None
    if not words:
        raise ValueError("WordleRollout got an empty `words` list: pass the training words to draw secrets from.")
    check_words(list(words), "training")
    return sorted(words)


class Sessions:
    """WebSocket sessions to the TextArena server, one per game played at once, opened as needed and kept open
    across rollouts (each session holds one game's state on the server).

    Each is a `helpers.servers.resilient` client: a waking Space (503) and a full one (CAPACITY_REACHED) are
    waited for, a reset on a dropped session is resent on a new one; a guess on a dropped session is never
    replayed (it uses up a turn, and an upstream server ignores seed/word): `step` raises `EpisodeFailed`
    and the game counts as failed. `stats` sums them over the sessions."""

    def __init__(self, base_url: str):
        self.base_url = base_url
        self.clients: list = []

    def take(self, n: int) -> list:
        from textarena_env import TextArenaEnv

        while len(self.clients) < n:
            self.clients.append(resilient(TextArenaEnv, base_url=self.base_url).connect())
        return self.clients[:n]

    @property
    def stats(self) -> dict:
        """rollouts, scored, retried, failed, ... summed over this object's sessions."""
        total: dict = {}
        for client in self.clients:
            for key, value in client.stats.as_dict().items():
                total[key] = total.get(key, 0) + value
        return total

    def close(self) -> None:
        for client in self.clients:
            try:
                client.close()
            except Exception:  # the server may already be gone
                pass
        self.clients = []


def prompt_text(prompt) -> str:
    """A dataset prompt as text (a plain string, or the last user message of a conversation)."""
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content", "") for m in prompt if m.get("role") == "user"]
    return users[-1] if users else ""


def game_record(game: Game, streams: dict) -> dict:
    """The record of one finished game, for metrics (`summarize`) and the held-out evaluation: its skills
    (`game_skills`), its reward `streams` (as the rollout computed them), its guesses and feedback."""
    observation = game.result.observation
    won = bool(observation.won)
    correct = float(game.result.reward or 0.0)
    guesses = [m.guess for m in game.moves]
    parsed = [g for g in guesses if g is not None]
    return {
        "seed": game.seed,
        "word": game.word or observation.secret_word,
        "correct": correct,
        **game_skills(game.moves, won),
        "streams": dict(streams),
        "guesses": guesses,
        "feedback": [m.feedback for m in game.moves],
        "parsed_guesses": len(parsed),
        "repeated_guesses": len(parsed) - len(set(parsed)),
        "invalid_moves": sum(not m.valid for m in game.moves),
        "secret_word": observation.secret_word,
        "first_reply": game.replies[0] if game.replies else "",
        "failed": game.failed,   # its session dropped mid-game: its streams are 0, not the game's
    }


def summarize(episodes: list[dict], window: int = 1) -> dict:
    """Metrics over the recorded games: counts, win rate, repeated-guess rate, and the mean of each
    reward stream over the first and the last `window` training steps."""
    if not episodes:
        raise ValueError("No games were recorded: did training run?")
    steps = sorted({e["step"] for e in episodes})
    first = [e for e in episodes if e["step"] in steps[:window]]
    last = [e for e in episodes if e["step"] in steps[-window:]]
    parsed = sum(e["parsed_guesses"] for e in episodes)

    def mean(rows, key):
        return sum(float(r[key]) for r in rows) / len(rows)

    metrics = {
        "episodes": len(episodes),
        "steps_with_rollouts": len(steps),
        "win_rate": mean(episodes, "won"),
        "repeated_guess_rate": (sum(e["repeated_guesses"] for e in episodes) / parsed) if parsed else 0.0,
        "guess_parse_rate": parsed / max(1, sum(e["turns"] for e in episodes)),
        "mean_turns": mean(episodes, "turns"),
    }
    for key in episodes[0]["streams"]:   # the rollout's reward streams, e.g. correct, valid, consistent, letters
        metrics[f"{key}_first"] = sum(e["streams"][key] for e in first) / len(first)
        metrics[f"{key}_last"] = sum(e["streams"][key] for e in last) / len(last)
    return metrics
