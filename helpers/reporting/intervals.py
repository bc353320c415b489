"""95 % intervals for what the notebooks measure: a share (Wilson), a mean, and the paired change between two
evaluations of the same questions.

Before and after training score the same questions, so `paired_change` compares them question by question: a change
of a few points can be real even when the two accuracy intervals overlap. It takes any two results whose `samples`
hold a "question" and a "score" each (`helpers.chain_sum.evaluation.EvalResult`,
`helpers.openreward.evaluation.SplitEvalResult`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def wilson_interval(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % interval for a proportion; sane at 0 % and 100 %, unlike the normal approximation."""
    if n == 0:
        return (0.0, 0.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass
class PairedChange:
    """How accuracy moved between two evaluations of the same questions.

    `change` is the mean per-question score difference (after - before), `ci` its 95 % interval (normal
    approximation on the n paired differences), `gained`/`lost` the questions whose score went up/down."""

    n: int
    change: float
    ci: tuple[float, float]
    gained: int
    lost: int
    measure: str = "accuracy"   # or "exactly right" (`paired_change(..., exact=True)`)

    def points(self) -> str:
        """The change in points with its 95 % interval: '+5.4 [+2.6, +8.2]' (what the before/after plot writes)."""
        lo, hi = self.ci
        return f"{self.change * 100:+.1f} [{lo * 100:+.1f}, {hi * 100:+.1f}]"

    def __str__(self) -> str:
        lo, hi = self.ci
        verdict = "an improvement" if lo > 0 else "a loss" if hi < 0 else "within noise: the interval contains 0"
        return (f"{self.measure} {self.change * 100:+.1f} points [{lo * 100:+.1f}, {hi * 100:+.1f}] on the same {self.n} "
                f"questions ({self.gained} gained, {self.lost} lost): {verdict}")


def mean_interval(values: list[float], z: float = 1.96) -> tuple[float, tuple[float, float]]:
    """The mean of `values` and its 95 % interval (normal approximation, sample standard deviation): for paired
    differences here and the per-game skills of `helpers.wordle.evaluation`."""
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    half = z * sd / math.sqrt(n)
    return mean, (mean - half, mean + half)


def check_same_questions(before, after) -> None:
    """Refuse to pair two evaluations unless they answered the same questions in the same order."""
    questions_before = [s["question"] for s in before.samples]
    if questions_before != [s["question"] for s in after.samples] or not questions_before:
        raise ValueError("paired_change needs two evaluations of the same questions: run evaluate_policy "
                         "with the same seed, n and dataset before and after training.")


def paired_change(before, after, z: float = 1.96, *, exact: bool = False) -> PairedChange:
    """Compare two evaluations question by question (both must come from
    `helpers.chain_sum.evaluation.evaluate_policy` with the same
    seed and n, which serves the same questions in the same order; or from
    `helpers.openreward.evaluation.evaluate_on_split` on the same split and n).

    `exact`: compare exactly right answers (score 1.0) instead of the scores, which for reasoning_gym include
    partial credit ("-72" for 72 scores 0.67) that a policy can learn to collect."""
    check_same_questions(before, after)
    value = (lambda s: float(s["score"] == 1.0)) if exact else (lambda s: s["score"])
    diffs = [value(a) - value(b) for b, a in zip(before.samples, after.samples)]
    mean, (lo, hi) = mean_interval(diffs, z)
    # scores lie in [0, 1], so a change lies in [-1, 1]
    return PairedChange(n=len(diffs), change=mean, ci=(max(-1.0, lo), min(1.0, hi)),
                        gained=sum(d > 0 for d in diffs), lost=sum(d < 0 for d in diffs),
                        measure="exactly right" if exact else "accuracy")
