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


def training_curves(log_history: list[dict], keys: list[str], *, title: str = "", reference: dict | None = None,
                    save_to=None):
    """One small panel per metric (e.g. reward, reward_std, frac_reward_zero_std), over steps. `reference`:
    {key: helpers.reporting.reference.Band} drawn under the run's curve (the measured runs' range, their mean dashed)."""
    import matplotlib.pyplot as plt

    keys = [k for k in keys if series(log_history, k)[0]]
    if not keys:
        raise ValueError("None of the requested metrics were logged: train for more logging_steps.")
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3), squeeze=False)
    for ax, key in zip(axes[0], keys):
        steps, values = series(log_history, key)
        band = (reference or {}).get(key)
        if band is not None and band.steps:
            ax.fill_between(band.steps, band.low, band.high, color="0.85", label=band.label())
            ax.plot(band.steps, band.mean, color="0.5", linestyle="--", linewidth=1)
        ax.plot(steps, values, marker="o" if len(steps) < 30 else None, label="this run")
        if band is not None and band.steps:
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
                      title: str = "", save_to=None):
    """Grouped bars of before/after metrics in [0, 1], with error bars from `<key>_ci` when present.

    `keys` maps metric name -> label, e.g. {"format_compliance": "Format compliance",
    "accuracy": "Accuracy"}; the `before`/`after` dicts are EvalResult.summary() outputs.
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
    ax.set_xticks(x, [keys[n] for n in names])
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("share of held-out questions")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)   # beside the axes: bars reach 100 %
    if title:
        ax.set_title(title)
    fig.tight_layout()
    _save(fig, save_to)
    return fig
