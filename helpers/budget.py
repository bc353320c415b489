"""A wall-clock budget for any transformers/TRL trainer (SFT in notebook 02, GRPO in notebook 01).

    budget = time_budget_callback(settings.train_minutes)   # None: no limit
    trainer = SFTTrainer(..., callbacks=[budget]); trainer.train()
    budget.stopped_early                                      # True if the budget, not max_steps, ended it
"""

from __future__ import annotations

import time


def time_budget_callback(minutes: float | None):
    """A TrainerCallback that ends training after `minutes` of wall time (None: never).

    A CPU run's speed depends on the machine and on what else runs on it; a time budget keeps a
    workshop run to its slot whatever the step time, where `max_steps` alone would not.
    """
    from transformers import TrainerCallback

    class TimeBudget(TrainerCallback):
        def __init__(self):
            self.started = None
            self.stopped_early = False

        def on_train_begin(self, args, state, control, **kwargs):
            self.started = time.monotonic()

        def on_step_end(self, args, state, control, **kwargs):
            if minutes is not None and self.started is not None and time.monotonic() - self.started > minutes * 60:
                control.should_training_stop = True
                self.stopped_early = state.global_step < state.max_steps
            return control

    return TimeBudget()
