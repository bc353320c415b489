"""Held-out Wordle evaluation: fixed secret words training never draws, played greedily through the real
TextArena server, before and after training, with 95 % intervals and the paired change per skill.

    train_words, eval_words = split_words(wordle_words(), n_eval=150)
    before = evaluate_wordle(model, tokenizer, env_url, eval_words, player=WordleRollout)
    ...train on train_words...
    after = evaluate_wordle(model, tokenizer, env_url, eval_words, player=WordleRollout)
    for change in paired_changes(before, after): print(change)

`player` is notebook 03's rollout class (its "rollout-func" cell): each game is played by its own turn loop
(same prompt, same tokens, same chat template), only greedy instead of sampled, so what the evaluation
measures is what GRPO trained, and an edit to the rollout reaches both.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field

from helpers.chain_sum.evaluation import default_batch_size
from helpers.compute.generation import generate_in_batches
from helpers.compute.precision import autocast
from helpers.compute.processes import is_main_process, on_main
from helpers.reporting.intervals import mean_interval, wilson_interval
from helpers.rollouts import TemplateView, tokenizer_of
from helpers.wordle.game import DATASET_PROMPT, check_words

EVAL_WORDS_SEED = 20_261_125   # fixes which words are held out; training draws only from the others

# The skills, as (key, what it is, scale): per-game values are averaged over games.
SKILLS = (
    ("valid", "valid guesses (a real, new five-letter word in brackets)", "share"),
    ("consistent", "guesses consistent with all feedback so far", "share"),
    ("greens_yellows", "greens + yellows per valid guess", "letters"),
    ("turns", "turns played before the game ended", "turns"),
    ("won", "games won", "share"),
)


def wordle_words() -> list[str]:
    """The secret words TextArena's Wordle-v0 draws from (its 1,384 five-letter nouns), sorted."""
    from textarena_env.server.environment import DEFAULT_ENV_ID, template_game

    import textarena as ta

    game = template_game(DEFAULT_ENV_ID)
    while isinstance(game, ta.Wrapper):
        game = game.env
    return sorted(game.word_list)


def split_words(words: list[str], n_eval: int, seed: int = EVAL_WORDS_SEED) -> tuple[list[str], list[str]]:
    """(training words, held-out words): `n_eval` words drawn with `seed`, the rest for training."""
    words = sorted(set(words))
    if not 0 < n_eval < len(words):
        raise ValueError(f"split_words: n_eval must be between 1 and {len(words) - 1} (the word list has "
                         f"{len(words)} words), not {n_eval}.")
    held_out = sorted(random.Random(seed).sample(words, n_eval))
    kept = set(held_out)
    return [w for w in words if w not in kept], held_out


def check_held_out(train_words: list[str], eval_words: list[str]) -> None:
    """Refuse an evaluation set that shares words with training (it would measure memory, not play)."""
    shared = sorted(set(train_words) & set(eval_words))
    if shared:
        raise ValueError(f"{len(shared)} evaluation word(s) are also training words ({', '.join(shared[:5])}"
                         f"{', ...' if len(shared) > 5 else ''}): build both lists with split_words().")


@dataclass
class WordleEval:
    """One held-out evaluation: per-game records in `games`, and per skill the mean over games with its
    95 % interval (`won`: Wilson interval; the others: normal approximation over games)."""

    n: int
    words: list[str]
    metrics: dict = field(default_factory=dict)   # skill -> {"mean": x, "ci": [lo, hi]}
    games: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "WordleEval":
        return cls(**d)

    def summary(self) -> dict:
        """Flat numbers for metrics.json: `<skill>` and `<skill>_ci`, and how far play follows one script."""
        out = {"n": self.n}
        for key, _, _ in SKILLS:
            out[key] = self.metrics[key]["mean"]
            out[key + "_ci"] = self.metrics[key]["ci"]
        out.update(same_script(self.games))
        return out

    def __str__(self) -> str:
        lines = [f"{self.n} held-out games, greedy:"]
        for key, what, scale in SKILLS:
            m, (lo, hi) = self.metrics[key]["mean"], self.metrics[key]["ci"]
            value = f"{m:.1%} [{lo:.1%}, {hi:.1%}]" if scale == "share" else f"{m:.2f} [{lo:.2f}, {hi:.2f}]"
            lines.append(f"  {what:<58} {value}")
        script = same_script(self.games)
        lines.append(f"  {'games playing the commonest sequence of guesses':<58} {script['same_sequence']:.1%}"
                     f"  ({', '.join(g or '?' for g in script['commonest'])}; "
                     f"{script['sequences']} different sequences)")
        return "\n".join(lines)


def same_script(games: list[dict]) -> dict:
    """How far the guesses depend on the feedback: the share of games that play the commonest sequence of guesses
    (1.0: one script for every secret word, whatever the game answers), that sequence, and how many different
    sequences were played. Every greedy game opens with the same guess (same prompt); only reading the feedback
    makes the later ones differ."""
    from collections import Counter

    if not games:
        return {"same_sequence": 0.0, "commonest": [], "sequences": 0}
    counts = Counter(tuple(g["guesses"]) for g in games)
    commonest, n = counts.most_common(1)[0]
    return {"same_sequence": n / len(games), "commonest": list(commonest), "sequences": len(counts)}


def summarize_games(games: list[dict], words: list[str]) -> WordleEval:
    """A WordleEval from per-game records (`helpers.wordle.game.game_record`, as the rollout's `score` returns them)."""
    if not games:
        raise ValueError("No held-out games were played: pass at least one evaluation word.")
    metrics = {}
    for key, _, _ in SKILLS:
        if key == "won":
            wins = sum(g["won"] for g in games)
            metrics[key] = {"mean": wins / len(games), "ci": list(wilson_interval(wins, len(games)))}
        else:
            mean, ci = mean_interval([float(g[key]) for g in games])
            metrics[key] = {"mean": mean, "ci": list(ci)}
    return WordleEval(n=len(games), words=list(words), metrics=metrics, games=games)


def evaluate_wordle(model, tokenizer, base_url: str, words: list[str], *, player, max_turns: int = 6,
                    max_new_tokens: int = 12, chat_template_kwargs: dict | None = None, precision: str | None = None,
                    batch_size: int | None = None, prompt: str | None = None, max_sessions: int = 64) -> WordleEval:
    """Play one greedy game per word in `words` through the TextArena server at `base_url`, all games in
    lockstep (one batched generation per turn), and summarize the skills.

    `player` is the rollout class whose turn loop plays the games: `player(base_url, max_turns=...)` gives an
    object with `play(trainer_or_view, prompts, seeds, words, generate=...)`, `score(game)` and `close()`
    (notebook 03's `WordleRollout`); the evaluation passes it a greedy `generate` and a `TemplateView` for a trainer.
    `chat_template_kwargs` and `max_new_tokens` should be the trainer's (e.g. `{"enable_thinking": False}` for
    Qwen3), and `precision` the autocast it trains in, so the evaluation sees the policy GRPO trains. At most
    `max_sessions` games run at once (the server needs that many free session slots)."""
    import torch

    if not words:
        raise ValueError("evaluate_wordle needs at least one word: pass the held-out side of split_words().")
    check_words(words, "evaluation")
    view = TemplateView(tokenizer, dict(chat_template_kwargs or {}))
    text_tokenizer = tokenizer_of(view)
    eos = text_tokenizer.eos_token_id
    pad = text_tokenizer.pad_token_id if text_tokenizer.pad_token_id is not None else eos

    def greedy(prompts: list[list[int]]) -> list[dict]:
        model.eval()
        with torch.no_grad(), autocast(precision, model.device.type):
            positions = max(map(len, prompts), default=0) + max_new_tokens
            rows = generate_in_batches(model, prompts, batch_size=batch_size or default_batch_size(model, positions,
                                                                                                 precision),
                                       pad_token_id=pad, max_new_tokens=max_new_tokens, do_sample=False)
        outputs = []
        for row in rows:
            ids = row[: row.index(eos) + 1] if eos in row else row
            outputs.append({"completion_ids": ids, "text": text_tokenizer.decode(ids, skip_special_tokens=True)})
        return outputs

    rollout = player(base_url, max_turns=max_turns)   # its own sessions, closed at the end
    games = []
    try:   # at most `max_sessions` games at once: the server's session slots are shared with training
        for start in range(0, len(words), max_sessions):
            chunk = list(words[start:start + max_sessions])
            games += rollout.play(view, [prompt or DATASET_PROMPT] * len(chunk),
                                 list(range(start, start + len(chunk))), chunk, generate=greedy)
    finally:
        rollout.close()
    return summarize_games([rollout.score(g) for g in games], words)


@dataclass
class SkillChange:
    """How one skill moved between two evaluations of the same words: the mean per-game difference
    (after - before) with its 95 % interval, and the games that went up / down."""

    key: str
    what: str
    scale: str
    n: int
    change: float
    ci: tuple[float, float]
    gained: int
    lost: int

    @property
    def resolved(self) -> bool:
        """The interval excludes 0."""
        return self.ci[0] > 0 or self.ci[1] < 0

    def points(self) -> str:
        """The change with its 95 % interval: points of a share ('+5.4 [+2.6, +8.2]'), else in its own unit."""
        lo, hi = self.ci
        if self.scale == "share":
            return f"{self.change * 100:+.1f} [{lo * 100:+.1f}, {hi * 100:+.1f}]"
        return f"{self.change:+.2f} [{lo:+.2f}, {hi:+.2f}]"

    def __str__(self) -> str:
        lo, hi = self.ci
        verdict = "up" if lo > 0 else "down" if hi < 0 else "within noise"
        numbers = self.points().replace(" [", " points [", 1) if self.scale == "share" else self.points()
        return f"{self.what:<58} {numbers}  ({self.gained} games up, {self.lost} down: {verdict})"


def paired_changes(before: WordleEval, after: WordleEval, z: float = 1.96) -> list[SkillChange]:
    """Each skill's paired change, game by game, between two evaluations of the same words."""
    if before.words != after.words or not before.words:
        raise ValueError("paired_changes needs two evaluations of the same words: run evaluate_wordle with the same "
                         "held-out words before and after training.")
    changes = []
    for key, what, scale in SKILLS:
        diffs = [float(a[key]) - float(b[key]) for b, a in zip(before.games, after.games)]
        mean, ci = mean_interval(diffs, z)
        changes.append(SkillChange(key, what, scale, len(diffs), mean, ci,
                                   sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)))
    return changes


def skill_bars(evaluations: dict[str, WordleEval], *, title: str = "", save_to=None):
    """One panel per skill: each evaluation's mean with its 95 % interval, side by side (e.g. base, warm
    start, after GRPO), and under it the paired change, game by game, from the second-to-last stage to the last
    (what the last stage did: intervals of two bars can overlap for a change the paired one resolves)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SKILLS), figsize=(3.2 * len(SKILLS), 3.3), squeeze=False)
    names = list(evaluations)
    changes = paired_changes(evaluations[names[-2]], evaluations[names[-1]]) if len(names) > 1 else []
    for ax, (key, what, _), change in zip(axes[0], SKILLS, changes or [None] * len(SKILLS)):
        if change is not None:
            ax.set_xlabel(f"{names[-2]} -> {names[-1]}, paired:\n{change.points()}", fontsize=8)
        means = [evaluations[n].metrics[key]["mean"] for n in names]
        lows = [m - evaluations[n].metrics[key]["ci"][0] for n, m in zip(names, means)]
        highs = [evaluations[n].metrics[key]["ci"][1] - m for n, m in zip(names, means)]
        ax.bar(names, means, yerr=[lows, highs], capsize=4, color=["tab:gray", "tab:blue", "tab:green"][:len(names)])
        ax.set_title(what if len(what) < 34 else key, fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(title or "held-out games (95 % intervals)", fontsize=10)
    fig.tight_layout()
    if save_to is not None and is_main_process():   # several processes (accelerate launch): written once
        fig.savefig(save_to, dpi=120)
    return fig


class HeldOut:
    """The held-out games of one run: `evaluate_wordle` on fixed `words` with fixed settings (the rollout class that
    plays them, its turns, tokens per guess, chat template, precision), so every stage (base, warm start, after
    GRPO, the probe while training) plays the same games the same way and only the model changes.

        held_out = HeldOut(env_url, eval_words, player=WordleRollout, max_turns=6, max_new_tokens=16)
        before = held_out(model, tokenizer, show=True)   # prints the skills and the first game
    """

    def __init__(self, base_url: str, words: list[str], *, player, **settings):
        if not words:
            raise ValueError("HeldOut needs at least one word: pass the held-out side of split_words().")
        self.base_url, self.words, self.player, self.settings = base_url, list(words), player, settings

    def __call__(self, model, tokenizer, *, words: list[str] | None = None, show: bool = False) -> WordleEval:
        """`model` plays the held-out games (or the first few, `words`), greedily; `show`: print the result and the
        first game's guesses and feedback. Several processes (`accelerate launch`): the main one plays, every
        process gets the result."""
        return on_main(self._play, model, tokenizer, words=words, show=show)

    def _play(self, model, tokenizer, *, words: list[str] | None, show: bool) -> WordleEval:
        result = evaluate_wordle(model, tokenizer, self.base_url, self.words if words is None else words,
                                 player=self.player, **self.settings)
        if show:
            print(result)
            print("first game:", result.games[0]["guesses"], "->", result.games[0]["feedback"])
        return result
