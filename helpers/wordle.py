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

Reward streams (the original TRL example's four), all in [0, 1], per game:
    correct     the environment's final reward: 1.0 for a win; after six guesses TextArena gives
                partial credit (the last guess's letters in place, yellows counting half)
    greens      green letters in the last feedback / 5
    yellows     yellow letters in the last feedback / 5
    repetition  share of turns that produced a guess not made before in the game
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from helpers.prompts import WORDLE_SYSTEM_PROMPT
from helpers.rollouts import chat_prompt_ids, env_turn_ids, generate_rollout_completions, tokenizer_of

SYSTEM_PROMPT = WORDLE_SYSTEM_PROMPT   # helpers.prompts holds every system prompt

DATASET_PROMPT = "Play Wordle like an expert."  # the original script's prompt; each row of the dataset is one game

_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
_BRACKETED_WORD = re.compile(r"\[\s*([A-Za-z]{5})\s*\]")
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
    match = _BRACKETED_WORD.search(text)
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


def repetition_score(guesses: list[str | None]) -> float:
    """Share of turns whose guess is new in this game (no guess counts as not new); 0.0 for no turns."""
    if not guesses:
        return 0.0
    seen, fresh = set(), 0
    for guess in guesses:
        if guess is not None and guess not in seen:
            fresh += 1
        if guess is not None:
            seen.add(guess)
    return fresh / len(guesses)


# -- reward functions: they read the per-game values the rollout returned (extra keys reach kwargs) --
def _passthrough(completions, values):
    return [float(v) for v in values] if values is not None else [0.0] * len(completions)


def reward_correct(completions, correct_reward=None, **kwargs) -> list[float]:
    """Win (1.0) / loss signal from the environment."""
    return _passthrough(completions, correct_reward)


def reward_greens(completions, green_reward=None, **kwargs) -> list[float]:
    """Green letters in the last feedback / 5."""
    return _passthrough(completions, green_reward)


def reward_yellows(completions, yellow_reward=None, **kwargs) -> list[float]:
    """Yellow letters in the last feedback / 5."""
    return _passthrough(completions, yellow_reward)


def reward_repetition(completions, repetition_reward=None, **kwargs) -> list[float]:
    """Share of turns with a new guess (repeats and non-answers score 0)."""
    return _passthrough(completions, repetition_reward)


REWARD_FUNCS = [reward_correct, reward_greens, reward_yellows, reward_repetition]


@dataclass
class Game:
    """One game's tokens and record while it is played."""

    seed: int
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    guesses: list[str | None] = field(default_factory=list)
    invalid_moves: int = 0
    done: bool = False
    result: object = None  # the last StepResult

    def add(self, ids: list[int], logprobs: list[float] | None, from_model: bool) -> None:
        self.completion_ids += ids
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        self.env_mask += [int(from_model)] * len(ids)


class WordleRollout:
    """A `rollout_func` for GRPOTrainer: `GRPOTrainer(..., rollout_func=WordleRollout(url))`.

    Args:
        base_url: the TextArena Wordle server (local or a Space).
        max_turns: guesses per game at most (Wordle allows 6).
        seed: secret words are drawn with seeds seed, seed+1, ... (one per GRPO group).
        system_prompt: the system message of every game.
        max_new_tokens: tokens per guess; default the trainer's max_completion_length.

    `episodes` keeps one record per finished game (step, guesses, rewards, win) for metrics.
    """

    def __init__(self, base_url: str, *, max_turns: int = 6, seed: int = 0,
                 system_prompt: str = SYSTEM_PROMPT, max_new_tokens: int | None = None):
        self.base_url = base_url
        self.max_turns = max_turns
        self.next_seed = seed
        self.system_prompt = system_prompt
        self.max_new_tokens = max_new_tokens
        self.episodes: list[dict] = []
        self._clients: list = []

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
        games = self.play(trainer, prompts, seeds)
        step = trainer.state.global_step
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
               "correct_reward": [], "green_reward": [], "yellow_reward": [], "repetition_reward": []}
        for game in games:
            record = self.score(game)
            self.episodes.append({"step": step, **record})
            out["prompt_ids"].append(game.prompt_ids)
            out["completion_ids"].append(game.completion_ids)
            out["logprobs"].append(game.logprobs)
            out["env_mask"].append(game.env_mask)
            for key in ("correct", "green", "yellow", "repetition"):
                out[f"{key}_reward"].append(record[key])
        return out

    def play(self, trainer, prompts: list, seeds: list[int]) -> list[Game]:
        """Play one game per prompt, all at once: each turn is one batched generation."""
        from textarena_env import TextArenaAction

        clients = self._sessions(len(prompts))
        games = []
        for client, prompt, seed in zip(clients, prompts, seeds):
            result = client.reset(seed=seed)
            user = f"{_text_of(prompt)}\n\n{result.observation.prompt}".strip()
            messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": user}]
            games.append(Game(seed=seed, prompt_ids=chat_prompt_ids(trainer, messages), result=result))
        eos = tokenizer_of(trainer).eos_token_id
        for turn in range(self.max_turns):
            active = [i for i, g in enumerate(games) if not g.done]
            if not active:
                break
            outputs = generate_rollout_completions(
                trainer, [games[i].prompt_ids + games[i].completion_ids for i in active],
                max_new_tokens=self.max_new_tokens)
            last_turn = turn == self.max_turns - 1
            for i, output in zip(active, outputs):
                game = games[i]
                game.add(output["completion_ids"], output["logprobs"], from_model=True)
                game.replies.append(output["text"])
                game.guesses.append(extract_guess(output["text"]))
                result = clients[i].step(TextArenaAction(message=guess_message(output["text"])))
                game.result = result
                game.invalid_moves += int(result.observation.invalid_move)
                game.done = bool(result.done)
                if not game.done and not last_turn:
                    if not game.completion_ids or game.completion_ids[-1] != eos:
                        game.add([eos], None, from_model=False)  # close a reply cut at max tokens
                    game.add(env_turn_ids(trainer, result.observation.last_message), None, from_model=False)
        return games

    @staticmethod
    def score(game: Game) -> dict:
        """The four reward values and the record of one finished game."""
        observation = game.result.observation
        greens, yellows = feedback_counts(observation.feedback)
        parsed = [g for g in game.guesses if g is not None]
        return {
            "seed": game.seed,
            "correct": float(game.result.reward or 0.0),
            "green": greens / 5.0,
            "yellow": yellows / 5.0,
            "repetition": repetition_score(game.guesses),
            "won": bool(observation.won),
            "turns": len(game.guesses),
            "guesses": game.guesses,
            "parsed_guesses": len(parsed),
            "repeated_guesses": len(parsed) - len(set(parsed)),
            "invalid_moves": game.invalid_moves,
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
    for key in ("correct", "green", "yellow", "repetition"):
        metrics[f"{key}_first"] = mean(first, key)
        metrics[f"{key}_last"] = mean(last, key)
    return metrics
