"""One readable line per trainer log, for runs watched as text (`make demo`) rather than in Jupyter.

Inside a Jupyter kernel transformers draws training as an HTML table that holds the loss only: TRL's reward
never reaches it, and a papermill stream shows just `<IPython.core.display.HTML object>`. The demo calls
`print_every_log()` in the kernel before the first cell; every Trainer built afterwards (SFTTrainer,
GRPOTrainer) then also prints, each `logging_steps`:

    [train] step 4/36  loss 0.812  reward 0.25  tool calls 0.625  | 12 s/step, ~6.4 min left

The notebooks themselves are unchanged; run alone they keep transformers' usual display.
"""

from __future__ import annotations

import time

# What a learner reads, in this order, with a short label: SFT logs loss and token accuracy, GRPO the reward.
SHOWN = {"loss": "loss", "mean_token_accuracy": "token acc", "reward": "reward", "reward_std": "reward std",
         "tools/call_frequency": "tool calls", "completions/mean_length": "reply len"}


def log_line(logs: dict, step: int, max_steps: int, seconds_per_step: float | None = None) -> str | None:
    """The one-line form of a trainer's log dict; None for a dict with nothing shown (e.g. the final summary)."""
    parts = [f"{label} {logs[key]:.3g}" for key, label in SHOWN.items()
             if isinstance(logs.get(key), (int, float))]
    if not parts:
        return None
    line = f"[train] step {step}/{max_steps}  " + "  ".join(parts)
    if seconds_per_step:
        line += f"  | {seconds_per_step:.2g} s/step"
        if step < max_steps:
            line += f", ~{_duration((max_steps - step) * seconds_per_step)} left"
    return line


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def print_every_log() -> None:
    """Add a `LogLine` callback to every transformers Trainer created from now on in this process."""
    import transformers.trainer
    from transformers import TrainerCallback

    class LogLine(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.started = time.monotonic()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs:
                return
            per_step = (time.monotonic() - self.started) / state.global_step if state.global_step else None
            line = log_line(logs, state.global_step, state.max_steps, per_step)
            if line:
                print(line, flush=True)

    if not any(getattr(c, "__name__", "") == "LogLine" for c in transformers.trainer.DEFAULT_CALLBACKS):
        transformers.trainer.DEFAULT_CALLBACKS.append(LogLine)
