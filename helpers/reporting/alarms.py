"""Alarms while GRPO trains: is the reward going up for the right reason?

The training reward says the policy got better at what the reward pays for. `RunWatch` checks, after every
logged step, the signs that this is not what you wanted, from what the trainer and the environment already
produce, and prints an alarm the moment one fires (and keeps it for the run's record):

- `reward_up_probe_down`: the training reward climbs while a small held-out probe (a handful of questions
  played greedily, a few times during the run) falls and stays down. The policy learns something the reward pays
  for and the skill does not contain: reward hacking, or overfitting the training questions.
- `length_collapse`: replies shrink to under half their first length (the working, or the answer, is dropped).
- `length_clipped`: most replies run into `max_completion_length`, cut before they answer.
- `tool_use_vanished`: rollouts stop calling the tools they called at the start.
- `no_gradient`: nearly every group scored all its rollouts alike (`frac_reward_zero_std`), so GRPO has nothing
  to learn from: "nothing is learning" is then expected, and the fix is the task's difficulty or the temperature.
  When that happens after the reward rose to the best the run has seen, it is `saturated` instead: not a fault,
  the sign that more steps add nothing.

Each alarm fires only when its sign is larger than what the same reading shows by chance (`Thresholds` gives
the arithmetic). `replay_alarms` runs the same checks over a stored run (tests/test_alarm_replay.py replays every
measured run that way). An alarm is a reason to look, not a verdict: the paired held-out evaluation decides.

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
    """When each alarm fires, each beyond its own noise. The trend checks compare the mean of the first `window`
    logged steps with the last `window` (fewer in a short run: half the steps logged, at least one).

    The probe (`reward_up_probe_down`): notebook 01 plays 16 held-out sums greedily every 10 steps. Between the
    start and a later reading some of the 16 change answer: 21-27 % of the 900 held-out sums did over measured runs
    (e.g. 133 gained and 68 lost), so m = 3-4 of 16. With no change in skill each is a gain or a loss at even
    odds, and a reading's net change has a standard deviation of sqrt(m) / 16 = 11-13 points: one reading moves
    about +-12 points by chance. A drop of 3 of 16 (18.75 points, 1.6 sd) happens by chance in 8-10 % of single
    readings (exact binomial, 20-25 % of answers changed; 1-3 % for a run gaining the recipe's +8 points), and early
    in training more answers change than that: two of three training seeds on a card read 75 % at the start and
    38-44 % at step 10, and the one-reading rule this replaces (any reading 20 points down, 4 of 16) called both
    hacking; one of them ended +7.6 [+4.7, +10.5] held-out. So one reading, however low, never fires: the last
    `probe_persist` readings (2: 10 steps apart in notebook 01) must each be `probe_drop` below the first. If
    their chance changes were independent, that happens to a no-change run at 0.6-1 % per pair of readings; readings
    that share changed answers make it likelier, which is why the fall must also come with a rising reward, and why
    the held-out evaluation decides. It still fires on every measured run whose probe fell and stayed: lr 2e-5
    (44 -> 19 -> 25 %), FREEZE_LAYERS=0 (44 -> ... -> 19 -> 25 %), reasoning_gym's partial-credit hole (62 -> 50 ->
    44 -> 38 %, held-out -3.1), and tests/test_alarms.py's policy built to hack. Persistence, rather than the two
    other ways: a paired interval on the same 16 questions still excludes 0 for the card runs' dip (6 of 16 lost,
    none gained: [-62, -13] points), and needs the probe's answers one by one; a larger probe (64 sums halve the
    noise) costs four times the probe's time, where each 16-sum reading already costs about a training step.
    The reward half (`reward_rise`, first against last `window` steps) is the direction only: one step's reward in
    notebook 01 is 16 rollouts on 2 questions and spreads +-0.3, so it says "did not fall", not "rose".

    `no_gradient` / `saturated`: TRL's `frac_reward_zero_std` is the share of a step's groups whose rollouts
    scored alike, and the `cpu` recipes of notebooks 01, 03 and 04 sample 2 groups a step. The six reference runs
    of notebook 01 had 47-59 % of groups alike; the old window (3 steps, 6 groups, all alike) then happens by chance
    in 1.6-4.2 % of windows, and in 49-90 % of 80-step runs (simulated): it fired in 4 of the 6, which all gained.
    The share is now read over the last `zero_std_groups` groups (24: 12 steps there): 90 % alike (22 of 24) at a
    59 % rate has probability 5e-4 per window, about 1.6 % of runs; a run that has really stopped learning (every
    group alike, notebook 03's seed 2 from step 8) still fires. A row without a group count counts as one group.

    Reply length, clipping and tool use need no more: a 3-step mean of 48 rollouts moves by 2-3 tokens of ~77 (the
    stored runs' per-step spread is 4-5 tokens), and a clipped or tool-calling share by about 7 points, against the
    halving or the 25-point moves these alarms look for."""

    window: int = 3
    reward_rise: float = 0.05      # the training reward counts as climbing from this rise on (its direction only)
    probe_drop: float = 0.18       # each of the last `probe_persist` probe readings this far below the first ...
    probe_persist: int = 2         # ... (3 of 16 questions, 18.75 points: see above)
    collapse: float = 0.5          # last length below this share of the first
    min_length: float = 8.0        # (a first length under this many tokens cannot collapse meaningfully)
    clipped: float = 0.5           # share of replies cut at max_completion_length ...
    clipped_start: float = 0.25    # ... when fewer than this were cut at the start
    tool_start: float = 0.2        # tool calls per rollout at the start for "vanished" to mean anything
    tool_left: float = 0.25        # last tool calls below this share of the first
    zero_std: float = 0.9          # share of groups without a gradient ...
    zero_std_groups: int = 24      # ... over at least this many of the last groups


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


def probe_alarm(reward: tuple[float, float] | None, probes: list[tuple[int, float]],
                t: Thresholds = Thresholds()) -> str | None:
    """`reward_up_probe_down`'s message, or None: the training reward's (first, last) window means rose by
    `t.reward_rise` while each of the last `t.probe_persist` probe readings is `t.probe_drop` or more below the
    first (`Thresholds` says why one reading is not enough)."""
    if not reward or len(probes) < 1 + t.probe_persist or reward[1] - reward[0] < t.reward_rise:
        return None
    first_step, first = probes[0]
    recent = probes[-t.probe_persist:]
    if any(first - value < t.probe_drop - 1e-9 for _, value in recent):
        return None
    fell = " -> ".join(f"{value:.0%} (step {step})" for step, value in recent)
    return (f"training reward {reward[0]:.2f} -> {reward[1]:.2f} while the held-out probe fell from {first:.0%} "
            f"(step {first_step}) to {fell}: down at {len(recent)} readings in a row, not one noisy reading. The "
            "policy may be learning what the reward pays for, not the skill. Read the gallery below, and check the "
            "reward against a strict answer; the held-out evaluation after training decides.")


def _recent_groups(rows: list[dict], need: int) -> list[dict] | None:
    """The last rows logging `zero_std` that hold at least `need` groups (a row's `groups`, 1 when unknown)."""
    recent, groups = [], 0
    for row in reversed([row for row in rows if row.get("zero_std") is not None]):
        recent.append(row)
        groups += row.get("groups") or 1
        if groups >= need:
            return recent[::-1]
    return None


def check_alarms(rows: list[dict], probes: list[tuple[int, float]], t: Thresholds = Thresholds(),
                 final: bool = True) -> dict[str, str]:
    """The alarms true now, {kind: what it says}, from the logged `rows` ({"reward", "length", ...} per step, and
    "groups": the GRPO groups behind the row's `zero_std`) and the probe's `(step, value)` points. Mid-run
    (`final=False`) a trend check waits for `2 * window` logged steps; the groups check always waits for
    `t.zero_std_groups` groups."""
    found = {}
    message = probe_alarm(_ends(rows, "reward", t.window, final), probes, t)
    if message:
        found["reward_up_probe_down"] = message
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
    recent = _recent_groups(rows, t.zero_std_groups)
    if recent:
        groups = sum(row.get("groups") or 1 for row in recent)
        alike = sum(row["zero_std"] * (row.get("groups") or 1) for row in recent) / groups
        if alike >= t.zero_std:
            # whether the reward rose before the groups went alike: over every step so far, since this check
            # has its own wait and must not read "no rise" from a run too young for `reward`
            rise = _ends(rows, "reward", t.window)
            rewards = [row["reward"] for row in rows if row.get("reward") is not None]
            last = _mean(row.get("reward") for row in recent)
            if rise and last is not None and rise[1] - rise[0] >= t.reward_rise and last >= 0.95 * max(rewards):
                found["saturated"] = (
                    f"the reward rose {rise[0]:.2f} -> {rise[1]:.2f} to the best the run has seen and now every "
                    "group scores alike: the policy has learned what this reward can teach, and more steps add "
                    "nothing. Stop here, or make the task harder.")
            else:
                found["no_gradient"] = (
                    f"{alike:.0%} of the last {groups:g} groups scored all their rollouts alike (reward "
                    f"{last if last is not None else float('nan'):.2f}): no gradient, so a flat reward is expected. "
                    "All right: make the task harder; all wrong: easier; identical rollouts: sample hotter.")
    return found


def groups_per_log(args) -> float | None:
    """The GRPO groups behind one logged `frac_reward_zero_std`, from the trainer's GRPOConfig `args`: each
    generation batch scores `generation_batch_size / num_generations` groups (every process's, gathered), one batch
    every `steps_per_generation * num_iterations` micro-steps, and TRL averages the batches of a logging interval.
    None when `args` is not a GRPOConfig (then `check_alarms` counts a row as one group)."""
    try:
        per_batch = args.generation_batch_size / args.num_generations
        batches_per_step = args.gradient_accumulation_steps / (args.steps_per_generation * args.num_iterations)
        logging = args.logging_steps if args.logging_steps >= 1 else 1   # a ratio of the run: at least one step
    except (AttributeError, TypeError, ZeroDivisionError):
        return None
    return max(per_batch, per_batch * batches_per_step * logging)


def replay_alarms(rows: list[dict], probes: list[tuple[int, float]],
                  t: Thresholds = Thresholds()) -> dict[str, int]:
    """{kind: the step it fired at} as `RunWatch` would have raised them on a stored run: a probe reading taken at a
    step is checked before that step's logged row (TrainerCallback order: `on_step_end`, then `on_log`), every
    check mid-run, then the end-of-run check. `rows` as `check_alarms` takes them, each with its "step"."""
    fired: dict[str, int] = {}
    points = sorted(probes)
    seen, taken = [], 0

    def check(step: int, final: bool = False) -> None:
        for kind in check_alarms(seen, points[:taken], t, final=final):
            fired.setdefault(kind, step)

    for row in rows:
        while taken < len(points) and points[taken][0] <= row["step"]:
            taken += 1
            check(points[taken - 1][0])
        seen.append(row)
        check(row["step"])
    taken = len(points)
    check(max([row["step"] for row in rows] + [p[0] for p in points] + [0]), final=True)
    return fired


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
                self._add_row(logs.get("step", 0), logs, groups_per_log(args))
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
        if logs and self._add_row(state.global_step, logs, groups_per_log(args)):
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

    def _add_row(self, step: int, logs: dict, groups: float | None = None) -> bool:
        if LOGGED["reward"] not in logs:
            return False
        row = {"step": step} if groups is None else {"step": step, "groups": groups}
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
