"""Wordle with GRPO: guess parsing, the four reward streams, and a multi-turn `rollout_func`.

The rollout plays whole games against the TextArena Wordle server (`textarena_env`), one
WebSocket session per game, all games of a batch in lockstep (one batched generation per turn).
Each game is ONE growing conversation:

    prompt_ids      system + the game's instructions + assistant header       (not trained)
    completion_ids  guess 1 | game's feedback as a user turn | guess 2 | ... | last guess
    env_mask        1 ... 1 | 0 ................................ 0 | 1 ... | 1 ... 1
    logprobs        sampled-token logprobs for model tokens, 0.0 for the feedback tokens

so the loss only pushes on tokens the model produced, while every guess is conditioned on all the
feedback before it. Games in one GRPO group (the `num_generations` copies of a prompt, which
arrive next to each other) share a secret word, so their rewards are comparable.

Reward streams, all in [0, 1], one value per game, each rewarding one skill the held-out evaluation
(`helpers.wordle_eval`) measures, counted over the game's `max_turns` turns (not over the moves played):
a game cut short by a second invalid move in a row scores 0 for the turns it never played, and a won
game keeps full marks for the turns it did not need (`turn_rewards`):
    correct     the environment's final reward: 1.0 for a win; otherwise TextArena's partial credit
                (the last guess's letters in place, yellows counting half)
    valid       turns played with a guess the game accepted (a real, new five-letter word in brackets)
    consistent  turns after the first feedback played with a guess that could still be the secret word
                (keep the greens, move the yellows, drop the greys): playing the information
    letters     greens + yellows of each accepted guess / 5, per turn: getting closer
(TRL's original Wordle example rewards the last feedback's greens and yellows and non-repetition;
a game's last row says little about the moves before it, and a repeat is already an invalid move.)
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from helpers.prompts import WORDLE_SYSTEM_PROMPT
from helpers.rollouts import chat_prompt_ids, env_turn_ids, generate_rollout_completions, tokenizer_of

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
                         "helpers.wordle_eval.split_words(wordle_words(), n).")


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
    """The valid / consistent / letters reward streams of one game, each averaged over its `max_turns` turns:
    turns a game never played (it ended on a second invalid move) count 0, turns a won game did not need
    count 1. Averaging over the moves played instead rewarded cutting a game short after one good guess (a
    measured GRPO run learned exactly that: docs/measurements.md#notebook-03)."""
    spare = max(0, max_turns - len(moves)) if won else 0
    first_row = next((i for i, m in enumerate(moves) if m.feedback), None)
    after_first = max_turns - 1 - first_row if first_row is not None else 0
    consistent = ((sum(m.consistent for m in moves[first_row + 1:]) + spare) / after_first
                  if after_first > 0 else float(won))
    return {
        "valid": min(1.0, (sum(m.valid for m in moves) + spare) / max_turns),
        "consistent": min(1.0, consistent),
        "letters": min(1.0, (sum((5 - m.feedback.count("X")) / 5 for m in moves if m.valid) + spare) / max_turns),
    }


# -- reward functions: they read the per-game values the rollout returned (extra keys reach kwargs) --
def _passthrough(completions, values):
    return [float(v) for v in values] if values is not None else [0.0] * len(completions)


def reward_correct(completions, correct_reward=None, **kwargs) -> list[float]:
    """The environment's final reward: 1.0 for a win, partial credit after six guesses."""
    return _passthrough(completions, correct_reward)


def reward_valid(completions, valid_reward=None, **kwargs) -> list[float]:
    """Turns played with an accepted guess, over the game's turns."""
    return _passthrough(completions, valid_reward)


def reward_consistent(completions, consistent_reward=None, **kwargs) -> list[float]:
    """Turns after the first feedback played with a guess that could still be the secret word."""
    return _passthrough(completions, consistent_reward)


def reward_letters(completions, letters_reward=None, **kwargs) -> list[float]:
    """Greens + yellows of each accepted guess / 5, per turn."""
    return _passthrough(completions, letters_reward)


REWARD_FUNCS = [reward_correct, reward_valid, reward_consistent, reward_letters]
STREAMS = ("correct", "valid", "consistent", "letters")   # the rollout's `<stream>_reward` keys


@dataclass
class Game:
    """One game's tokens and record while it is played."""

    seed: int
    word: str | None           # the secret word asked for (None: the server drew it from the seed)
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    done: bool = False
    result: object = None  # the last StepResult

    def add(self, ids: list[int], logprobs: list[float] | None, from_model: bool) -> None:
        self.completion_ids += ids
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        self.env_mask += [int(from_model)] * len(ids)

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


class WordleRollout:
    """A `rollout_func` for GRPOTrainer: `GRPOTrainer(..., rollout_func=WordleRollout(url))`.

    Args:
        base_url: the TextArena Wordle server (local or a Space).
        max_turns: guesses per game at most (Wordle allows 6).
        seed: GRPO group i plays with seed seed+i (one secret word per group).
        words: secret words to draw from (with `random.Random(seed)`), e.g. the training side of
            `helpers.wordle_eval.split_words`, so training never plays a held-out word. None: the
            server draws from its own list with the seed.
        system_prompt: the system message of every game.
        max_new_tokens: tokens per guess; default the trainer's max_completion_length.

    `episodes` keeps one record per finished game (step, word, moves, skills, win) for metrics.
    """

    def __init__(self, base_url: str, *, max_turns: int = 6, seed: int = 0, words: list[str] | None = None,
                 system_prompt: str = SYSTEM_PROMPT, max_new_tokens: int | None = None):
        self.base_url = base_url
        self.max_turns = max_turns
        self.next_seed = seed
        self.words = sorted(words) if words is not None else None
        if self.words is not None and not self.words:
            raise ValueError("WordleRollout got an empty `words` list: pass the training words to draw secrets from.")
        check_words(self.words or [], "training")
        self.system_prompt = system_prompt
        self.max_new_tokens = max_new_tokens
        self.episodes: list[dict] = []
        self._clients: list = []

    def word_for(self, seed: int) -> str | None:
        """The secret word a group with this seed plays (None: the server picks it from the seed)."""
        return random.Random(seed).choice(self.words) if self.words is not None else None

    # one WebSocket session per game played at once, kept open across steps
    def _sessions(self, n: int) -> list:
        from textarena_env import TextArenaEnv

        while len(self._clients) < n:
            self._clients.append(TextArenaEnv(base_url=self.base_url).sync().connect())
        return self._clients[:n]

    def close(self) -> None:
        for client in self._clients:
            try:
                client.close()
            except Exception:  # the server may already be gone
                pass
        self._clients = []

    def __call__(self, prompts: list, trainer) -> dict[str, list]:
        group = max(1, getattr(trainer, "num_generations", 1))
        seeds = [self.next_seed + i // group for i in range(len(prompts))]
        self.next_seed += -(-len(prompts) // group)
        games = self.play(trainer, prompts, seeds, [self.word_for(s) for s in seeds])
        step = trainer.state.global_step
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
               **{f"{key}_reward": [] for key in STREAMS}}
        for game in games:
            record = self.score(game)
            self.episodes.append({"step": step, **record})
            out["prompt_ids"].append(game.prompt_ids)
            out["completion_ids"].append(game.completion_ids)
            out["logprobs"].append(game.logprobs)
            out["env_mask"].append(game.env_mask)
            for key in STREAMS:
                out[f"{key}_reward"].append(record["streams"][key])
        return out

    def play(self, trainer, prompts: list, seeds: list[int], words: list[str | None] | None = None,
             generate=None) -> list[Game]:
        """Play one game per prompt, all at once: each turn is one batched generation.

        `trainer` supplies the tokenizer and chat template (a `helpers.rollouts.TemplateView` will do);
        `generate(list of token-id lists) -> outputs` defaults to sampling with the trainer
        (`generate_rollout_completions`); the held-out evaluation passes a greedy one."""
        from textarena_env import TextArenaAction

        if generate is None:
            def generate(ids):
                return generate_rollout_completions(trainer, ids, max_new_tokens=self.max_new_tokens)
        words = words or [None] * len(prompts)
        clients = self._sessions(len(prompts))
        games = []
        for client, prompt, seed, word in zip(clients, prompts, seeds, words):
            result = client.reset(seed=seed, word=word) if word else client.reset(seed=seed)
            user = f"{_text_of(prompt)}\n\n{result.observation.prompt}".strip()
            messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": user}]
            games.append(Game(seed=seed, word=word, prompt_ids=chat_prompt_ids(trainer, messages), result=result))
        eos = tokenizer_of(trainer).eos_token_id
        for turn in range(self.max_turns):
            active = [i for i, g in enumerate(games) if not g.done]
            if not active:
                break
            outputs = generate([games[i].prompt_ids + games[i].completion_ids for i in active])
            last_turn = turn == self.max_turns - 1
            for i, output in zip(active, outputs):
                game = games[i]
                game.add(output["completion_ids"], output.get("logprobs"), from_model=True)
                game.replies.append(output["text"])
                result = clients[i].step(TextArenaAction(message=guess_message(output["text"])))
                game.result = result
                game.judge(output["text"], result.observation)
                game.done = bool(result.done)
                if not game.done and not last_turn:
                    if not game.completion_ids or game.completion_ids[-1] != eos:
                        game.add([eos], None, from_model=False)  # close a reply cut at max tokens
                    game.add(env_turn_ids(trainer, result.observation.last_message), None, from_model=False)
        return games

    def score(self, game: Game) -> dict:
        """The record of one finished game: its skills (what the evaluation measures) and its reward streams."""
        observation = game.result.observation
        won = bool(observation.won)
        skills = game_skills(game.moves, won)
        correct = float(game.result.reward or 0.0)
        guesses = [m.guess for m in game.moves]
        parsed = [g for g in guesses if g is not None]
        return {
            "seed": game.seed,
            "word": game.word or observation.secret_word,
            "correct": correct,
            **skills,
            "streams": {"correct": correct, **turn_rewards(game.moves, won, self.max_turns)},
            "guesses": guesses,
            "feedback": [m.feedback for m in game.moves],
            "parsed_guesses": len(parsed),
            "repeated_guesses": len(parsed) - len(set(parsed)),
            "invalid_moves": sum(not m.valid for m in game.moves),
            "secret_word": observation.secret_word,
            "first_reply": game.replies[0] if game.replies else "",
        }


def _text_of(prompt) -> str:
    """A dataset prompt as text (a plain string, or the last user message of a conversation)."""
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content", "") for m in prompt if m.get("role") == "user"]
    return users[-1] if users else ""


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
    for key in STREAMS:
        metrics[f"{key}_first"] = sum(e["streams"][key] for e in first) / len(first)
        metrics[f"{key}_last"] = sum(e["streams"][key] for e in last) / len(last)
    return metrics
