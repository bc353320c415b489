"""Training progress you can trust: an estimate after the first steps, and an optional wall-clock cap.

    budget = time_budget_callback(settings.train_minutes)   # None: run every step, just estimate
    trainer = SFTTrainer(..., callbacks=[budget]); trainer.train()
    budget.stopped_early                                      # True if the cap, not max_steps, ended it
    budget.summary()                                          # steps run/planned, s/step: for metrics.json

After the second step (the first warms up) it prints the measured time per step and how long the
planned steps will take; then a progress line every ~10 % of the run. With a cap it also says up front
when this machine will not reach the planned steps inside it, and what to set instead, rather than
stopping silently with a weaker model. With a floor (`min_steps`, the fewest steps that showed a gain in
measured runs) a machine a little too slow trains to the floor, and one far too slow stops right after
the estimate and says why (`budget.too_few_steps`): its steps would change nothing anyone could measure.
"""

from __future__ import annotations

import math
import time

from helpers.compute.processes import share


# A run whose budget buys fewer than `min_steps` trains on to them when that takes at most this many times the
# budget, and otherwise stops after its estimate: fewer steps resolve no gain (docs/measurements.md#notebook-01).
MAX_EXTENSION = 1.5
# The budget never ends training before this step: in Jupyter, transformers' progress bar (5.23, 5.24) raises a TypeError
# when training ends at step 2 of a longer plan, the first step it displayed. So a run found too slow at its two-step
# estimate stops one step later.
FIRST_STOP_STEP = 3
# The estimate times steps that had a gradient (a step without one skips its loss pass: helpers.compute.loss_forward); when
# none has come this many steps after `estimate_after` (or by the last step), it times every step instead.
WAIT_FOR_GRADIENT = 2


def time_budget_callback(minutes: float | None, *, min_steps: int = 0, estimate_after: int = 2,
                         after_training: tuple[str, float | None] | None = None, num_iterations: int = 1,
                         out=print):
    """A TrainerCallback that estimates the run's length and ends training after `minutes` (None: never).

    `min_steps`: the fewest steps that showed the recipe's gain in measured runs. When the cap buys fewer, a
    machine that reaches them within MAX_EXTENSION times the cap trains on to them (and says so after two steps,
    with the numbers; the estimate times the steps that had a gradient, so it may wait for one); a slower one
    stops right there, `too_few_steps` holding why and what to change, rather than spend the cap and the
    evaluation after it on a change nobody can tell from noise.
    `after_training`: (what, seconds) of work that follows training and was already timed once on this
    machine (the evaluation after training repeats the one before), so the estimate says when the run ends,
    not only when training does; seconds None: not timed, nothing said.
    `num_iterations`: TRL's, the optimizer steps each batch of rollouts is used for. Only the first step of such
    a cycle generates, so the estimate times whole cycles: it leaves the first cycle out (not the first step)
    and waits for `estimate_after` cycles."""
    cycle = max(1, int(num_iterations))
    estimate_after = estimate_after * cycle
    from transformers import TrainerCallback

    class TrainingBudget(TrainerCallback):
        def __init__(self):
            self.started = None
            self.step_started = None
            self.step_seconds: list[float] = []
            self.step_had_gradient: list[bool] = []   # False: every trained weight's gradient was 0
            self._gradient_now = True
            self.estimated_at = None   # the step the estimate was made after
            self.stopped_early = False
            self.steps_planned = None
            self.steps_run = 0
            self.warned = False
            self.extended = False
            self.too_few_steps = None   # why training stopped after the estimate, when it did

        def on_train_begin(self, args, state, control, **kwargs):
            self.started = time.monotonic()
            self.steps_planned = state.max_steps

        def on_step_begin(self, args, state, control, **kwargs):
            self.step_started = time.monotonic()
            self._gradient_now = True

        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            """A step whose gradient is 0 everywhere (every group scored alike) skips its loss pass
            (helpers.compute.loss_forward), so it is quicker than a step that trains: the estimate leaves it out."""
            if model is not None:
                self._gradient_now = any(p.grad is not None and bool(p.grad.any())
                                         for p in model.parameters() if p.requires_grad)

        def on_step_end(self, args, state, control, **kwargs):
            self._decide(state, control)
            # several processes (accelerate launch): the main one's clock decides for all, so every process stops
            # after the same step (one that stopped alone would leave the others waiting for it)
            control.should_training_stop, self.stopped_early, self.too_few_steps = share(
                (control.should_training_stop, self.stopped_early, self.too_few_steps))
            return control

        def _decide(self, state, control) -> None:
            now = time.monotonic()
            if self.step_started is not None:
                self.step_seconds.append(now - self.step_started)
                self.step_had_gradient.append(self._gradient_now)
            self.steps_run = state.global_step
            planned = state.max_steps
            waited = state.global_step >= min(estimate_after + WAIT_FOR_GRADIENT, planned)   # or no step left
            if (self.estimated_at is None and state.global_step >= estimate_after
                    and (self.training_step_seconds or waited) and self.seconds_per_step):
                self.estimated_at = state.global_step
                self._estimate(planned)
            if self.too_few_steps and state.global_step >= max((self.estimated_at or 0) + 1, FIRST_STOP_STEP):
                out(self.too_few_steps, flush=True)
                control.should_training_stop = True
                self.stopped_early = True
                return
            if (self.estimated_at is not None and state.global_step > self.estimated_at and planned >= 10
                  and state.global_step % max(1, planned // 10) == 0 and state.global_step < planned):
                left = (planned - state.global_step) * self.seconds_per_step
                out(f"step {state.global_step}/{planned}, {now - self.started:.0f} s so far, "
                    f"~{left / 60:.1f} min left", flush=True)
            if (minutes is not None and self.started is not None and now - self.started > minutes * 60
                    and state.global_step >= max(min(min_steps, planned), min(FIRST_STOP_STEP, planned))):
                control.should_training_stop = True
                self.stopped_early = state.global_step < planned

        @property
        def seconds_per_step(self) -> float | None:
            """The mean step so far, the first (cycle) left out: it warms up."""
            timed = self.step_seconds[cycle:] or self.step_seconds
            return sum(timed) / len(timed) if timed else None

        @property
        def training_step_seconds(self) -> float | None:
            """The mean of the steps after the first (cycle) that had a gradient (what the estimate uses): a step
            without one runs no loss pass, and two steps are too few to say how often that happens."""
            timed = [t for t, trained in list(zip(self.step_seconds, self.step_had_gradient))[cycle:] if trained]
            return sum(timed) / len(timed) if timed else None

        def _estimate(self, planned: int) -> None:
            trained = self.training_step_seconds
            per_step = trained or self.seconds_per_step
            total = per_step * planned
            left_out = self.step_had_gradient[cycle:].count(False)
            why = f" (a step with a gradient; {left_out} without one, quicker, left out)" if left_out else ""
            if not trained:
                why = f" (no step had a gradient yet: {left_out} timed)"
            out(f"{per_step:.1f} s a step on this machine{why}: {planned} steps take about {total / 60:.1f} min",
                flush=True)
            self._warn(planned, per_step, total)
            if after_training is not None and after_training[1] and not self.too_few_steps:
                what, seconds = after_training
                training = total if minutes is None else min(total, max(minutes * 60, min(min_steps, planned) * per_step))
                out(f"then {what}: about {seconds / 60:.0f} min, as long as before training; both done about "
                    f"{(training + seconds) / 60:.0f} min after training began", flush=True)

        def _warn(self, planned: int, per_step: float, total: float) -> None:
            if minutes is None or total <= minutes * 60:
                return
            reachable = int(minutes * 60 / per_step)
            self.warned = True
            floor = min(min_steps, planned)
            if reachable < floor and floor * per_step <= MAX_EXTENSION * minutes * 60:
                self.extended = True
                out(f"WARNING: on this machine the {minutes}-minute budget (TRAIN_MINUTES) buys about {reachable} of "
                    f"{planned} steps, fewer than the {floor} this recipe needed to show its gain in measured runs "
                    f"(docs/measurements.md). Training goes on to step {floor}: about {floor * per_step / 60:.0f} "
                    f"minutes instead of {minutes}. MIN_STEPS=0 keeps the {minutes}-minute cap (the change will likely "
                    "be within noise); a faster machine or the gpu profile trains the whole plan.", flush=True)
                return
            if reachable < floor:
                needed = math.ceil(floor * per_step / 60)
                after = ""
                if after_training is not None and after_training[1]:
                    after = f", then {after_training[1] / 60:.0f} min for {after_training[0]}"
                self.too_few_steps = (
                    f"STOPPED after {max(self.steps_run + 1, FIRST_STOP_STEP)} steps: on this machine a step takes {per_step:.0f} s, so the "
                    f"{minutes}-minute budget (TRAIN_MINUTES) buys about {reachable} of {planned} steps, and the {floor} "
                    f"steps this recipe needed to show a gain in measured runs would take {needed} min. Fewer steps "
                    "changed nothing anyone could tell from noise (docs/measurements.md), so training stops here "
                    f"instead. To train them anyway: TRAIN_MINUTES={needed} ({needed} min{after}); MIN_STEPS=0 trains "
                    f"what {minutes} minutes buy; PROFILE='gpu' on a GPU (a free Colab T4) trains the whole plan.")
                out(f"WARNING: the {floor} steps this recipe needs would take {needed} min on this machine: "
                    "training stops after the next step (below, with what to change).", flush=True)
                return
            out(f"WARNING: the {minutes}-minute budget (TRAIN_MINUTES) stops training after about {reachable} of "
                f"{planned} steps on this machine, so the run trains less than its profile plans. Set "
                f"TRAIN_MINUTES=None to run every step (~{total / 60:.0f} min), or train on fewer examples.",
                flush=True)

        def summary(self) -> dict:
            per_step = self.seconds_per_step
            return {"steps_planned": self.steps_planned, "steps_run": self.steps_run,
                    "seconds_per_step": round(per_step, 2) if per_step else None,
                    "train_minutes": minutes, "stopped_by_time_budget": self.stopped_early,
                    "budget_warning": self.warned, "min_steps": min_steps, "budget_extended": self.extended,
                    "estimated_after_step": self.estimated_at,
                    "stopped_too_few_steps": self.too_few_steps}

    return TrainingBudget()


def train_timer():
    """A TrainerCallback that times `trainer.train()`: `seconds` (wall), and the load average when training began and
    ended (`load_before`, `load_after`), None until training ends. Why the load: a step's seconds mean little when
    something else shared the cores, so the run record says what else was running."""
    import os

    from transformers import TrainerCallback

    class TrainTimer(TrainerCallback):
        def __init__(self):
            self.seconds = self.load_before = self.load_after = None
            self._started = None

        def on_train_begin(self, args, state, control, **kwargs):
            self.load_before = os.getloadavg()[0]
            self._started = time.perf_counter()

        def on_train_end(self, args, state, control, **kwargs):
            self.seconds = time.perf_counter() - self._started
            self.load_after = os.getloadavg()[0]

    return TrainTimer()
