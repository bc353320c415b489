"""Plots every notebook shows inline and saves as PNG next to its metrics.

All functions take plain numbers (a trainer's `log_history`, a dict of before/after metrics) and
return the matplotlib Figure, so a notebook shows it by leaving it as the cell's last value or
calling `plt.show()`.
"""

from __future__ import annotations

from pathlib import Path

from helpers.compute.processes import is_main_process


def _save(fig, save_to) -> None:
    if save_to and is_main_process():   # several processes (accelerate launch): one file, written once
        Path(save_to).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(save_to, dpi=110, bbox_inches="tight")


def series(log_history: list[dict], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of `key` in a trainer's log_history, skipping entries without it."""
    rows = [(entry.get("step", i), entry[key]) for i, entry in enumerate(log_history)
            if entry.get(key) is not None]
    return [r[0] for r in rows], [float(r[1]) for r in rows]


def rolling_mean(values: list[float], window: int) -> list[float]:
    """Each value's mean with the `window - 1` before it (fewer at the start): a trend through noisy steps."""
    out = []
    for i in range(len(values)):
        part = values[max(0, i - window + 1):i + 1]
        out.append(sum(part) / len(part))
    return out


def smoothing_window(n: int) -> int:
    """Steps per rolling mean for a series of `n` logged steps: 1 (none) below 8, then about a tenth, at least 3."""
    return 1 if n < 8 else max(3, round(n / 10))


def training_curves(log_history: list[dict], keys: list[str], *, title: str = "", reference: dict | None = None,
                    save_to=None):
    """One small panel per metric (e.g. reward, reward_std, frac_reward_zero_std), over steps. `reference`:
    {key: helpers.reporting.reference.Band} drawn under the run's curve (the measured runs' range, their mean dashed).
    A series of 8 or more steps is drawn as faint points with its rolling mean over them (`smoothing_window`), the
    band smoothed over as many steps: one or two GRPO groups a step make a reward that jumps between 0 and 1."""
    import matplotlib.pyplot as plt

    keys = [k for k in keys if series(log_history, k)[0]]
    if not keys:
        raise ValueError("None of the requested metrics were logged: train for more logging_steps.")
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3), squeeze=False)
    for ax, key in zip(axes[0], keys):
        steps, values = series(log_history, key)
        window = smoothing_window(len(steps))
        band = (reference or {}).get(key)
        if band is not None and band.steps:
            smooth = (lambda v: rolling_mean(v, window)) if window > 1 else (lambda v: v)
            label = band.label() + (f", rolling mean over {window} steps" if window > 1 else "")
            ax.fill_between(band.steps, smooth(band.low), smooth(band.high), color="0.85", label=label)
            ax.plot(band.steps, smooth(band.mean), color="0.5", linestyle="--", linewidth=1)
        if window > 1:
            line = ax.plot(steps, rolling_mean(values, window), label=f"this run, rolling mean over {window} steps")
            ax.plot(steps, values, "o", markersize=2.5, alpha=0.3, color=line[0].get_color(), label="each step")
        else:
            ax.plot(steps, values, marker="o", label="this run")
        if (band is not None and band.steps) or window > 1:
            ax.legend(fontsize=7, frameon=False)
        ax.set_title(key.split("/")[-1] if len(key) > 30 else key, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    _save(fig, save_to)
    return fig


def before_after_bars(before: dict, after: dict, keys: dict[str, str], *, labels=("before", "after"),
                      title: str = "", paired: dict | None = None, save_to=None):
    """Grouped bars of before/after metrics in [0, 1], with error bars from `<key>_ci` when present.

    `keys` maps metric name -> label, e.g. {"format_compliance": "Format compliance",
    "accuracy": "Accuracy"}; the `before`/`after` dicts are EvalResult.summary() outputs. `paired`: {metric name:
    helpers.reporting.intervals.PairedChange}, written under that pair of bars. Two bars' intervals can overlap for a
    change the paired comparison (the same questions, before and after) resolves: the paired change answers "did it
    learn?".
    """
    import matplotlib.pyplot as plt
    import numpy as np

    names = list(keys)
    x = np.arange(len(names))
    width = 0.38
    fig, ax = plt.subplots(figsize=(1.8 + 2.2 * len(names), 3.4))
    for offset, metrics, label in ((-width / 2, before, labels[0]), (width / 2, after, labels[1])):
        values = [metrics[n] for n in names]
        cis = [metrics.get({"format_compliance": "format_ci"}.get(n, f"{n}_ci")) for n in names]
        err = None
        if all(ci is not None for ci in cis):
            err = np.array([[v - lo for v, (lo, _) in zip(values, cis)],
                            [hi - v for v, (_, hi) in zip(values, cis)]]).clip(min=0)
        bars = ax.bar(x + offset, values, width, yerr=err, capsize=4, label=label)
        ax.bar_label(bars, labels=[f"{v:.0%}" for v in values], padding=2, fontsize=9)
    ax.set_xticks(x, [keys[n] + (f"\npaired {paired[n].points()}" if n in (paired or {}) else "") for n in names])
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("share of held-out questions")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)   # beside the axes: bars reach 100 %
    if title:
        ax.set_title(title)
    fig.tight_layout()
    _save(fig, save_to)
    return fig
