"""Metrics every notebook records the same way, checked the same way: the held-out evaluation (01, 02) and
the precision the run chose (00-04)."""

from __future__ import annotations

import pytest


def assert_before_after_metrics(metrics: dict) -> None:
    """Intervals around each point estimate, and a paired change that agrees with the two accuracies."""
    for when in ("before", "after"):
        for key, ci in (("format", "format_ci"), ("exact", "exact_ci"), ("accuracy", "accuracy_ci")):
            value, (low, high) = metrics[f"{key}_{when}"], metrics[f"{ci}_{when}"]
            assert 0.0 <= low <= value <= high <= 1.0
        # "exactly right" counts only the full scores; the accuracy adds reasoning_gym's partial credit
        assert metrics[f"exact_{when}"] <= metrics[f"accuracy_{when}"] <= metrics[f"format_{when}"]
    # the paired comparison: the same questions before and after, so its change is the accuracy difference
    change, (low, high) = metrics["accuracy_change"], metrics["accuracy_change_ci"]
    assert change == pytest.approx(metrics["accuracy_after"] - metrics["accuracy_before"])
    assert low <= change <= high
    assert metrics["questions_gained"] + metrics["questions_lost"] <= metrics["eval_n"]
    if change > 0:
        assert metrics["questions_gained"] > 0
    if change < 0:
        assert metrics["questions_lost"] > 0
    # the same comparison on exactly right answers, partial credit left out
    exact, (low, high) = metrics["exact_change"], metrics["exact_change_ci"]
    assert exact == pytest.approx(metrics["exact_after"] - metrics["exact_before"]) and low <= exact <= high


def assert_precision_recorded(metrics: dict, text: str) -> None:
    """A CPU run measured fp32 and bf16 at start-up, kept the faster, and printed its choice; on a CPU without
    native bf16 (an AVX2 machine) it took fp32 untimed and said why."""
    from helpers.compute.hardware import cpu_native_bf16

    timings = metrics["precision_seconds_per_pass"]
    if cpu_native_bf16()[0] is False:
        assert metrics["precision"] == "fp32" and timings == {} and "not timed" in metrics["precision_reason"]
        assert "precision: fp32" in text
        return
    assert metrics["precision_device"] == "cpu" and metrics["precision_reason"].startswith("measured")
    assert set(timings) == {"fp32", "bf16"} and all(t > 0 for t in timings.values())
    assert timings[metrics["precision"]] == min(timings.values())   # the faster (recorded to the ms: a tie is either)
    assert f"precision: {metrics['precision']}" in text
