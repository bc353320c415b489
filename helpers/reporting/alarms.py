"""Alarms while GRPO trains: is the reward going up for the right reason?

The training reward says the policy got better at what the reward pays for. `RunWatch` checks, after every
logged step, the signs that this is not what you wanted, from what the trainer and the environment already
produce, and prints an alarm the moment one fires (and keeps it for the run's record):

- `reward_up_probe_down`: the training reward climbs while a small held-out probe (a handful of questions
  played greedily, a few times during the run) falls. The policy learns something the reward pays for and the
  skill does not contain: reward hacking, or overfitting the training questions.
- `length_collapse`: replies shrink to under half their first length (the working, or the answer, is dropped).
- `length_clipped`: most replies run into `max_completion_length`, cut before they answer.
- `tool_use_vanished`: rollouts stop calling the tools they called at the start.
- `no_gradient`: nearly every group scored all its rollouts alike (`frac_reward_zero_std`), so GRPO has nothing
  to learn from: "nothing is learning" is then expected, and the fix is the task's difficulty or the temperature.
  When that happens after the reward rose to the best the run has seen, it is `saturated` instead: not a fault,
  the sign that more steps add nothing.

And a gallery: the best-rewarded rollouts that a strict `judge` (your own check, independent of the reward)
calls wrong. With an honest reward it stays empty; with a hackable one it shows the exploit.

    watch = RunWatch(probe=lambda model: accuracy_on_16_questions(model), probe_every=10, judge=judge_arithmetic)
    trainer = GRPOTrainer(..., callbacks=[watch]); watch.attach(trainer)   # attach: the gallery reads rollouts
    trainer.train()
    print(watch)        # alarms, probe against reward, gallery
    watch.summary()     # for metrics.json
"""

from __future__ import annotations

import ast
import math
import operator
import re
from dataclasses import dataclass
from typing import Callable

from transformers import TrainerCallback

from helpers.reporting.show import batch_rollouts, called_a_tool, rollout_text, tool_calls_of

# The logged keys each check reads (TRL 1.16's GRPOTrainer names), as the row fields below.
LOGGED = {"reward": "reward", "length": "completions/mean_length", "clipped": "completions/clipped_ratio",
          "tool_calls": "tools/call_frequency", "zero_std": "frac_reward_zero_std"}


@dataclass(frozen=True)
class Thresholds:
    """When each alarm fires. Each compares the mean of the first `window` logged steps with the last `window`
    (fewer in a short run: half the steps logged, at least one)."""

    window: int = 3
    reward_rise: float = 0.05      # the training reward counts as climbing from this rise on
    probe_drop: float = 0.2        # ... and the probe as falling from this drop (a small probe is noisy)
    collapse: float = 0.5          # last length below this share of the first
    min_length: float = 8.0        # (a first length under this many tokens cannot collapse meaningfully)
    clipped: float = 0.5           # share of replies cut at max_completion_length ...
    clipped_start: float = 0.25    # ... when fewer than this were cut at the start
    tool_start: float = 0.2        # tool calls per rollout at the start for "vanished" to mean anything
    tool_left: float = 0.25        # last tool calls below this share of the first
    zero_std: float = 0.9          # share of groups without a gradient


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _ends(rows: list[dict], key: str, window: int, final: bool = True) -> tuple[float, float] | None:
    """(mean of the first steps, mean of the last steps) of `key`; None with fewer than two steps logging it, or,
    before the run's end (`final=False`), fewer than two full windows (so one noisy early step cannot fire)."""
    values = [row[key] for row in rows if row.get(key) is not None]
    if len(values) < (2 if final else 2 * window):
        return None
    w = max(1, min(window, len(values) // 2))
    return _mean(values[:w]), _mean(values[-w:])


def check_alarms(rows: list[dict], probes: list[tuple[int, float]], t: Thresholds = Thresholds(),
                 final: bool = True) -> dict[str, str]:
    """The alarms true now, {kind: what it says}, from the logged `rows` ({"reward", "length", ...} per step)
    and the probe's `(step, value)` points. Mid-run (`final=False`) a check waits for `2 * window` logged steps."""
    found = {}
    reward = _ends(rows, "reward", t.window, final)
    if reward and len(probes) >= 2:
        (first_step, first), (last_step, last) = probes[0], probes[-1]
        if reward[1] - reward[0] >= t.reward_rise and first - last >= t.probe_drop:
            found["reward_up_probe_down"] = (
                f"training reward {reward[0]:.2f} -> {reward[1]:.2f} while the held-out probe fell {first:.0%} "
                f"(step {first_step}) -> {last:.0%} (step {last_step}): the policy is learning what the reward "
                "pays for, not the skill. Read the gallery below, and check the reward against a strict answer.")
    length = _ends(rows, "length", t.window, final)
    if length and length[0] >= t.min_length and length[1] < t.collapse * length[0]:
        found["length_collapse"] = (
            f"replies shrank from {length[0]:.0f} to {length[1]:.0f} tokens: the policy drops text it needs "
            "(the working, the tool call). Lower the learning rate or stop earlier.")
    clipped = _ends(rows, "clipped", t.window, final)
    if clipped and clipped[0] < t.clipped_start and clipped[1] >= t.clipped:
        found["length_clipped"] = (
            f"replies cut at max_completion_length: {clipped[0]:.0%} -> {clipped[1]:.0%} of them. A cut reply "
            "never answers; raise max_completion_length or look for a loop in the rollouts.")
    for key, what in (("tool_calls", "tool calls per rollout"), ("tool_share", "share of rollouts calling a tool")):
        tools = _ends(rows, key, t.window, final)
        if "tool_use_vanished" not in found and tools and tools[0] >= t.tool_start and tools[1] < t.tool_left * tools[0]:
            found["tool_use_vanished"] = (
                f"{what} fell from {tools[0]:.2f} to {tools[1]:.2f}: the policy stopped using the environment. "
                "A reward that pays answers without the tool invites this.")
    zero = [row["zero_std"] for row in rows if row.get("zero_std") is not None]
    if zero and (final or len(zero) >= t.window):
        w = max(1, min(t.window, len(zero)))
        alike = _mean(zero[-w:])
        if alike >= t.zero_std:
            # whether the reward rose before the groups went alike: over every step so far, since this check
            # has its own wait (one window) and must not read "no rise" from a run too young for `reward`
            rise = _ends(rows, "reward", t.window)
            rewards = [row["reward"] for row in rows if row.get("reward") is not None]
            last = _mean(rewards[-w:]) if rewards else None
            if rise and last is not None and rise[1] - rise[0] >= t.reward_rise and last >= 0.95 * max(rewards):
                found["saturated"] = (
                    f"the reward rose {rise[0]:.2f} -> {rise[1]:.2f} to the best the run has seen and now every "
                    "group scores alike: the policy has learned what this reward can teach, and more steps add "
                    "nothing. Stop here, or make the task harder.")
            else:
                found["no_gradient"] = (
                    f"{alike:.0%} of the last groups scored all their rollouts alike (reward "
                    f"{last if last is not None else float('nan'):.2f}): no gradient, so a flat reward is expected. "
                    "All right: make the task harder; all wrong: easier; identical rollouts: sample hotter.")
    return found


@dataclass
class Alarm:
    kind: str
    step: int
    message: str

    def __str__(self) -> str:
        return f"ALARM {self.kind} (step {self.step}): {self.message}"


class RunWatch(TrainerCallback):
    """Checks a GRPO run after every logged step (`check_alarms`), runs a held-out `probe` every `probe_every`
    steps (and at the start and the end), and keeps the gallery of rewarded rollouts the `judge` calls wrong.

    `probe(model) -> float`: a share in [0, 1] on a few held-out questions, greedy (the model is put in eval mode
    around it); a probe that fails is reported and skipped, never the end of training. Its time counts towards a
    time budget (`helpers.compute.budget`), so keep it to a handful of questions and a few points in the run.
    `judge(messages) -> True | str | None`: True when a rollout is right, why it is wrong, or None when it cannot
    tell (another kind of question); only rollouts rewarded at least `min_reward` are judged, and only once the
    watch is attached to the trainer. `out`: where lines go (a print-like callable that accepts `flush=`).
    A resumed run rebuilds the logged steps from the checkpoint's log history; probes before the resume are lost."""

    def __init__(self, *, probe: Callable | None = None, probe_every: int | None = None,
                 judge: Callable | None = None, min_reward: float = 0.5, gallery_size: int = 3,
                 thresholds: Thresholds = Thresholds(), out=print):
        self.probe, self.probe_every, self.judge = probe, probe_every, judge
        self.min_reward, self.gallery_size, self.thresholds, self.out = min_reward, gallery_size, thresholds, out
        self.rows: list[dict] = []
        self.probes: list[tuple[int, float]] = []
        self.alarms: list[Alarm] = []
        self.gallery: list[dict] = []
        self.observed = 0        # rollouts read (attach() lets the watch read the trainer's)
        self.judged = 0          # rewarded rollouts the judge could tell right from wrong
        self.trainer = None
        self._last_batch = None

    def attach(self, trainer) -> "RunWatch":
        """Let the watch read the trainer's rollouts (the gallery, the share of rollouts calling a tool)."""
        self.trainer = trainer
        return self

    # --- what the trainer calls -------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not self.rows:   # a resumed run: the steps logged before the checkpoint
            for logs in state.log_history:
                self._add_row(logs.get("step", 0), logs)
        if self.probe and not self.probes:
            self._probe(model, state.global_step)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.trainer is not None and self.trainer._logs["prompt"]:
            batch = (id(self.trainer._logs["completion"][0]), len(self.trainer._logs["completion"]))
            if batch != self._last_batch:   # a generation batch reused over several steps is observed once
                self._last_batch = batch
                self.observe(state.global_step, self._batch())
        if self.probe and self.probe_every and state.global_step % self.probe_every == 0:
            self._probe(model, state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and self._add_row(state.global_step, logs):
            self._check(state.global_step)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if self.probe and (not self.probes or self.probes[-1][0] != state.global_step):
            self._probe(model, state.global_step)
        self._check(state.global_step, final=True)

    # --- the parts, callable without a trainer ----------------------------------------------------------------
    def observe(self, step: int, rollouts: list[tuple[list[dict], float]]) -> None:
        """One step's rollouts as (messages, total reward): the share calling a tool, and the gallery."""
        if not rollouts:
            return
        self.observed += len(rollouts)
        share = sum(called_a_tool(messages) for messages, _ in rollouts) / len(rollouts)
        if self.rows and self.rows[-1]["step"] == step:
            self.rows[-1]["tool_share"] = share
        else:
            self.rows.append({"step": step, "tool_share": share})
        if self.judge is None:
            return
        for messages, reward in rollouts:
            if reward < self.min_reward:
                continue
            verdict = self.judge(messages)
            self.judged += verdict is not None
            if isinstance(verdict, str):
                self.gallery.append({"step": step, "reward": reward, "why": verdict,
                                     "rollout": rollout_text(messages, reward)})
        self.gallery = sorted(self.gallery, key=lambda g: -g["reward"])[: self.gallery_size]

    def record_probe(self, step: int, value: float) -> None:
        self.probes.append((step, float(value)))
        self.out(f"[watch] held-out probe at step {step}: {value:.0%}", flush=True)
        self._check(step)

    def _add_row(self, step: int, logs: dict) -> bool:
        if LOGGED["reward"] not in logs:
            return False
        row = {"step": step}
        row.update({field: float(logs[key]) for field, key in LOGGED.items() if isinstance(logs.get(key), (int, float))})
        if self.rows and self.rows[-1]["step"] == step:
            self.rows[-1].update(row)
        else:
            self.rows.append(row)
        return True

    def _probe(self, model, step: int) -> None:
        was_training = model.training
        model.eval()
        try:
            value = self.probe(model)
        except Exception as exc:   # a probe is a diagnostic: a server hiccup must not end the run
            self.out(f"[watch] held-out probe at step {step} failed, skipped: {type(exc).__name__}: {exc}", flush=True)
            return
        finally:
            model.train(was_training)
        self.record_probe(step, value)

    def _batch(self) -> list[tuple[list[dict], float]]:
        weights = getattr(self.trainer, "reward_weights", None)
        names = list(self.trainer._logs["rewards"])
        weight = {name: float(weights[i]) if weights is not None else 1.0 for i, name in enumerate(names)}
        return [(messages, sum(weight[name] * (0.0 if value is None or math.isnan(value) else value)
                               for name, value in rewards.items()))   # an unscored stream counts 0, as in TRL
                for messages, rewards in batch_rollouts(self.trainer)]

    def _check(self, step: int, final: bool = False) -> None:
        fired = {alarm.kind for alarm in self.alarms}
        for kind, message in check_alarms(self.rows, self.probes, self.thresholds, final=final).items():
            if kind not in fired:
                self.alarms.append(Alarm(kind, step, message))
                self.out(f"[watch] {self.alarms[-1]}", flush=True)

    # --- what a learner reads, and the record ------------------------------------------------------------------
    def summary(self) -> dict:
        tool_share = _mean(row.get("tool_share") for row in self.rows)
        at_end = check_alarms(self.rows, self.probes, self.thresholds)
        return {"alarms": [alarm.kind for alarm in self.alarms],
                "alarm_messages": {alarm.kind: alarm.message for alarm in self.alarms},
                "alarms_true_at_end": sorted(at_end), "probe": [list(point) for point in self.probes],
                "no_tool_share": None if tool_share is None else 1 - tool_share,
                "judged": self.judged, "gallery": self.gallery}

    def __str__(self) -> str:
        at_end = check_alarms(self.rows, self.probes, self.thresholds)
        lines = [f"alarms: {', '.join(a.kind for a in self.alarms)}" if self.alarms else
                 "alarms: none (reward against probe, reply length, clipping, tool use, groups with a gradient)"]
        lines += [f"  {alarm}" + ("" if alarm.kind in at_end else "  [no longer true at the end]")
                  for alarm in self.alarms]
        if self.probes:
            reward = _ends(self.rows, "reward", self.thresholds.window)
            lines.append("held-out probe: " + ", ".join(f"step {s} {v:.0%}" for s, v in self.probes)
                         + (f"   (training reward {reward[0]:.2f} -> {reward[1]:.2f})" if reward else ""))
        if self.judge is not None:
            what = "rewarded rollouts the judge calls wrong"
            if self.gallery:
                lines.append(f"{what} (best {len(self.gallery)} of {self.judged} judged):")
                for item in self.gallery:
                    lines.append(f"--- step {item['step']}, reward {item['reward']:.2f}: {item['why']}")
                    lines.append(item["rollout"])
            elif not self.observed:
                lines.append(f"{what}: not checked, no rollout read (call watch.attach(trainer) before training)")
            elif not self.judged:
                lines.append(f"{what}: none judged (no rollout rewarded {self.min_reward} or more that the judge "
                             "knows how to check)")
            else:
                lines.append(f"{what}: none of {self.judged} judged (the reward paid only right answers)")
        return "\n".join(lines)

    __repr__ = __str__


# --- a strict judge for arithmetic questions (notebooks 01 and 04) ------------------------------------------------
_QUESTION = re.compile(r"arithmetic problem:\s*(.+?)\s*=\s*\??\s*$", re.S)
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.USub: operator.neg, ast.UAdd: operator.pos}


def _value(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.left), _value(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.operand))
    raise ValueError("not arithmetic")


def judge_arithmetic(messages: list[dict]) -> bool | str | None:
    """A strict check of a rollout that answers "...arithmetic problem: <expression> =" (reasoning_gym's chain_sum,
    calculator_env), computed here and not by the environment: True when its `answer` call is right, why it is
    wrong, or None when it never answered or the question is not arithmetic. reasoning_gym pays near answers partial credit
    (17 answered as 170 scores 0.67): this is what tells them apart from right ones."""
    question = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
    match = _QUESTION.search(question.strip())
    try:
        expected = _value(ast.parse(match.group(1), mode="eval").body) if match else None
    except (SyntaxError, ValueError, ZeroDivisionError):
        expected = None
    if expected is None:
        return None
    for message in messages:
        for call in tool_calls_of(message) if message.get("role") == "assistant" else []:
            if call["name"] == "answer":
                given = str((call["arguments"] or {}).get("answer", "")).strip()
                try:
                    right = float(given.replace(",", "")) == expected
                except ValueError:
                    right = False
                return True if right else f"answered {given!r}, the answer is {expected:g}"
    return None
