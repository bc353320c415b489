"""GRPO-specific helpers for notebook 01: one group's advantages, env-server sizing, the reward delta
and its diagnosis, the config as resolved.

    group = group_advantages([1.0, 0.0, 0.0, 1.0])       # what GRPO does with one group's rewards
    sessions = env_sessions_needed(grpo_config)           # MAX_CONCURRENT_ENVS for the env server
    delta = reward_delta(trainer.state.log_history)       # the training reward, first logs vs last logs, and its noise
    reward_funcs = [working_reward(0.5)]                  # a second reward: the share of true sums in the working
    print(diagnose(delta, change=paired_change(before, after), tool_call_frequency=...).message)   # the pair decides
    print(config_table(grpo_config))                      # the config's lesson fields, as resolved

The reward delta follows the original TRL/OpenEnv tutorial ("End-to-end OpenEnv walkthrough"), which reads the
same two numbers from the training logs; the diagnosis reads it only where no held-out evaluation ran.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from helpers.chain_sum.local_teacher import working_kind
from helpers.compute.generation import generate_shared
from helpers.compute.precision import autocast
from helpers.rollouts.tool_calls import strip_tool_calls

# Datasets the walkthrough names as drop-in swaps for chain_sum (any reasoning_gym name works).
SUGGESTED_DATASETS = ("chain_sum", "simple_equations", "letter_counting", "propositional_logic")


@dataclass
class GroupAdvantages:
    """One GRPO group: the rewards of the rollouts that answered one prompt, and what GRPO makes of them."""

    rewards: list[float]
    mean: float
    std: float
    advantages: list[float]

    def __str__(self) -> str:
        rows = [f"  rollout {i}: reward {r:.2f}  advantage {a:+.2f}"
                for i, (r, a) in enumerate(zip(self.rewards, self.advantages))]
        return "\n".join(rows + [f"  group mean {self.mean:.3f}, std {self.std:.3f}"
                                  + ("  -> every advantage is 0: this group teaches nothing" if self.std == 0 else "")])


def group_advantages(rewards: list[float], *, scale_rewards: str = "group", eps: float = 1e-4) -> GroupAdvantages:
    """The advantages GRPOTrainer (TRL 1.16, `_generate_and_score_completions`) gives one group's rollouts.

    advantage = reward - group mean, divided by (group std + 1e-4) when `scale_rewards="group"`
    (GRPOConfig's default; `"none"` skips the division). The std is the sample standard deviation
    (Bessel's correction, as TRL's `nanstd`). A group whose rewards all agree has std 0 and every
    advantage 0: no gradient. (TRL's `scale_rewards="batch"` divides by the whole batch's std instead.)
    """
    if scale_rewards not in ("group", "none"):
        raise ValueError(f"scale_rewards must be 'group' or 'none' for one group, not {scale_rewards!r}")
    rewards = [float(r) for r in rewards]
    if not rewards:
        raise ValueError("a GRPO group needs at least one reward")
    n = len(rewards)
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1)) if n > 1 else 0.0
    centred = [r - mean for r in rewards]
    advantages = centred if scale_rewards == "none" else [c / (std + eps) for c in centred]
    return GroupAdvantages(rewards=rewards, mean=mean, std=std, advantages=advantages)

def sample_group(model, tokenizer, messages: list[dict], *, n: int, tools=None, temperature: float = 1.0,
                 max_new_tokens: int = 64, precision: str | None = None, seed: int = 0) -> dict:
    """`n` sampled replies to one prompt, as GRPOTrainer samples a group (temperature, no top-k/top-p).

    Returns {"prompt_ids": [...], "completion_ids": [[...] per reply], "replies": [text per reply]};
    the ids are what `helpers.rollouts.describe_rollout` shows.
    """
    import torch

    text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False,
                                         enable_thinking=False)
    inputs = tokenizer(text, return_tensors="pt", add_special_tokens=False).to(model.device)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    torch.manual_seed(seed)
    model.eval()
    repeated = {key: value.repeat(n, 1) for key, value in inputs.items()}   # the group: n rows of one prompt
    with torch.no_grad(), autocast(precision, model.device.type):
        out = generate_shared(model, repeated["input_ids"], repeated["attention_mask"], do_sample=True,
                              temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens, pad_token_id=pad)
    prompt_ids = inputs["input_ids"][0].tolist()
    completion_ids = []
    for row in out[:, len(prompt_ids):].tolist():
        end = next((i + 1 for i, t in enumerate(row) if t in (tokenizer.eos_token_id, pad)), len(row))
        completion_ids.append(row[:end])
    replies = [tokenizer.decode(ids, skip_special_tokens=False) for ids in completion_ids]
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "replies": replies}


def same_question_share(served: list[str], group_size: int) -> float:
    """Share of GRPO groups whose rollouts all answered one question, from the questions the environment
    served in rollout order (each consecutive `group_size` resets are one group)."""
    groups = [served[i:i + group_size] for i in range(0, len(served), group_size)]
    return sum(len(set(g)) == 1 for g in groups) / max(len(groups), 1)


def question_seeds(n: int, seed: int, *, low: int, dataset_name: str = "chain_sum", dataset_config: dict | None = None,
                   carry_borrow_share: float | None = None) -> list[int]:
    """`n` chain_sum question seeds for GRPO's dataset rows, drawn from random.Random(seed) in [low, 2**31).

    `carry_borrow_share` None: the draws in order (the questions' natural mix, about half of 2-digit sums need a
    carry or a borrow). A share in [0, 1]: that share of the rows, spread evenly, get a question whose column work
    carries or borrows (`helpers.chain_sum.local_teacher.working_kind`), the rest one that does neither. Measured at 0.75:
    the policy learned to carry where it had not, and to carry where it should not (docs/measurements.md)."""
    import random

    draw = random.Random(seed)
    if carry_borrow_share is None:
        return [draw.randint(low, 2**31 - 1) for _ in range(n)]
    if not 0.0 <= carry_borrow_share <= 1.0:
        raise ValueError(f"CARRY_BORROW_SHARE={carry_borrow_share!r}: use a share between 0 and 1, or None for "
                         f"the questions' natural mix.")
    if dataset_name != "chain_sum":
        raise ValueError(f"CARRY_BORROW_SHARE sorts chain_sum questions by their column work; DATASET_NAME is "
                         f"{dataset_name!r}: set CARRY_BORROW_SHARE=None.")
    import reasoning_gym

    pools: dict[bool, list[int]] = {True: [], False: []}
    seeds = []
    for i in range(n):
        hard = math.floor((i + 1) * carry_borrow_share) > math.floor(i * carry_borrow_share)
        while not pools[hard]:
            candidate = draw.randint(low, 2**31 - 1)
            question = reasoning_gym.create_dataset("chain_sum", seed=candidate, size=1,
                                                    **(dataset_config or {}))[0]["question"]
            kind = working_kind(question)
            pools[bool({"carry", "borrow"} & set(kind.split(", ")))].append(candidate)
        seeds.append(pools[hard].pop(0))
    return seeds


# "7 + 8 = 15", "12 - 8 = 4", "7 - 1 - 3 = 3", "-73 - 49 = -122": integers joined by + and -, then "=" and one
# integer that no further term follows ("14 - 55 = -(55 - 14)" is no such statement and is skipped).
_STATEMENT = re.compile(r"(?<![\d)])(-?\d+(?:\s*[-+]\s*\d+)+)\s*=\s*(-?\d+)(?![\d(])(?!\s*[-+*/]\s*\d)")
_TERM = re.compile(r"([-+]?)\s*(\d+)")


def arithmetic_statements(text: str) -> list[bool]:
    """Whether each sum written in `text` ("ones 7 + 8 = 15", "80 - 63 = 17") is true, in order."""
    truths = []
    for left, right in _STATEMENT.findall(text):
        value = sum(int(digits) * (-1 if sign == "-" else 1) for sign, digits in _TERM.findall(left))
        truths.append(value == int(right))
    return truths


def _reply_text(completion) -> str:
    """What the policy wrote in one completion (TRL passes a message list for chat prompts), tool calls left out."""
    if isinstance(completion, str):
        return strip_tool_calls(completion)
    return "\n".join(strip_tool_calls(str(m.get("content") or "")) for m in completion if m.get("role") == "assistant")


def working_reward(weight: float):
    """A second GRPO reward beside the environment's: `weight` x the share of true sums in a reply's working.

    The environment pays 1 for a right answer and 0 otherwise, so a group whose rollouts are all wrong (most
    groups on sums that need a borrow) has no gradient at all. This one tells those rollouts apart: "ones 10 - 3 =
    7, borrow 1" is true where "ones 0 - 3 = 3" is not. A reply with no sums in it scores 0. Pass the returned
    function in GRPOTrainer's `reward_funcs` (logged as `rewards/working/mean`); the environment's reward, from
    `get_reward()`, is added to it. Measured at 0.5 (docs/measurements.md#notebook-01): it pays for true sums, not
    the right procedure, and the policy learned to drop carries ("tens 6 + 3 = 9" is true), so it is off by default."""
    if not weight > 0:
        raise ValueError(f"WORKING_REWARD={weight!r}: use a positive weight (0.5: half a right answer's reward for "
                         f"working whose sums are all true), or 0 for the environment's reward alone.")

    def working(completions, **kwargs) -> list[float]:
        rewards = []
        for completion in completions:
            truths = arithmetic_statements(_reply_text(completion))
            rewards.append(weight * sum(truths) / len(truths) if truths else 0.0)
        return rewards

    return working


def env_sessions_needed(config, *, extra: int = 1) -> int:
    """How many env-server sessions a GRPO run opens at once, plus `extra` (the evaluation's).

    TRL 1.16 keeps a pool of `environment_factory` instances per process and grows it to the number
    of rollouts in one generation batch (each instance holds one WebSocket session). A generation
    batch is `per_device_train_batch_size * steps_per_generation` rollouts per process, and
    `GRPOConfig.generation_batch_size` is that times the number of processes: every session
    of every process. The server's MAX_CONCURRENT_ENVS must be at least this.
    """
    return int(config.generation_batch_size) + extra


# The GRPOConfig fields notebook 01 sets from its profile: what `config_table` prints under the config cell.
LESSON_FIELDS = ("max_steps", "learning_rate", "lr_scheduler_type", "warmup_steps", "per_device_train_batch_size",
                 "gradient_accumulation_steps", "num_generations", "temperature", "max_completion_length",
                 "max_tool_calling_iterations", "top_entropy_quantile", "num_iterations")


def config_table(config, fields=LESSON_FIELDS) -> str:
    """`fields` of a GRPOConfig as resolved, one per line, and the generation batch they make: the values a
    cell that reads them from `settings` does not show."""
    width = max(map(len, fields))
    rows = []
    for name in fields:
        value = getattr(config, name)
        rows.append(f"  {name:<{width}}  {getattr(value, 'value', value)!r}")   # an enum (lr_scheduler_type): its value
    batch, group = config.generation_batch_size, config.num_generations
    return "\n".join(["GRPOConfig, as resolved:", *rows,
                      f"generation batch: {batch} rollouts = {batch // group} prompt rows x {group} generations"])


def check_dataset_name(name: str) -> None:
    """Raise a ValueError listing the valid reasoning_gym dataset names unless `name` is one."""
    from reasoning_gym.factory import DATASETS

    if name not in DATASETS:
        import difflib

        close = difflib.get_close_matches(str(name), sorted(DATASETS), n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ValueError(f"Unknown DATASET_NAME {name!r}.{hint} Valid reasoning_gym names ({len(DATASETS)}): "
                         f"{', '.join(sorted(DATASETS))}")


@dataclass
class RewardDelta:
    """Mean training reward over the first and last `window` logged steps (the original tutorial's metric), and
    `noise`: the standard error of `delta` from the spread of the logged rewards in the two windows (None with
    windows of one step)."""

    initial: float
    final: float
    delta: float
    window: int
    logged: int
    noise: float | None = None


def reward_delta(log_history: list[dict], key: str = "reward", window: int = 5) -> RewardDelta:
    """The training reward delta from `trainer.state.log_history`.

    The original tutorial averages the first 5 and the last 5 logged rewards. Short runs log fewer entries, so
    the window shrinks to half of them (at least 1) and the two ends never overlap. `noise` is
    sqrt(s_first^2 / w + s_last^2 / w), each s the sample standard deviation of the rewards in that window.
    """
    rewards = [float(entry[key]) for entry in log_history if entry.get(key) is not None]
    if not rewards:
        raise ValueError(f"No {key!r} in the log history: the trainer logged nothing (set logging_steps=1).")
    w = max(1, min(window, len(rewards) // 2))
    first, last = rewards[:w], rewards[-w:]
    initial, final = sum(first) / w, sum(last) / w
    noise = None
    if w > 1:
        spread = sum((x - initial) ** 2 for x in first) + sum((x - final) ** 2 for x in last)   # both windows
        noise = math.sqrt(spread / (w - 1) / w)
    return RewardDelta(initial=initial, final=final, delta=final - initial, window=w, logged=len(rewards), noise=noise)


@dataclass
class Diagnosis:
    # from the held-out pair: improved | within_noise | worse; from the training reward, where no evaluation ran:
    # reward_rose | reward_flat | reward_fell | too_easy | too_hard; either way: no_tool_calls
    verdict: str
    message: str


# What the measurements rejected, named where a run went wrong (docs/measurements.md; helpers/recipes.py says why).
REJECTED = ("a learning rate above the profile's (on cpu 1.5e-5 gained less and 2e-5 collapsed runs), MIXED_ONLY "
            "(dynamic sampling memorized its questions), WORKING_REWARD, EXACT_REWARD and NUM_ITERATIONS=2")


def diagnose(delta: RewardDelta, *, change=None, tool_call_frequency: float | None = None, flat: float = 0.02,
             high: float = 0.9, low: float = 0.2, z: float = 2.0) -> Diagnosis:
    """What the run shows and what to change, read from what decides.

    `change`: the paired held-out change after training (`helpers.reporting.intervals.paired_change(before,
    after)`, or anything with `change`, `ci`, `n`, `gained` and `lost`). Whenever an evaluation ran, it decides:
    its interval above 0 is a gain, below 0 a loss, across 0 no resolved change. The training reward does not: in
    notebook 01 a step's reward is 16 rollouts on 2 questions, and seeds whose reward fell or stayed flat gained
    held-out (docs/measurements.md#notebook-01). Without `change` (no evaluation after
    training) the reward delta speaks, and counts as a change only beyond its own noise: `z` times
    `delta.noise`, and at least `flat`. `high` / `low`: start rewards above / below which a run whose reward did
    not move reads as too easy / too hard. `tool_call_frequency` (TRL's `tools/call_frequency`) 0: the model
    never called the tool, whatever else.

    It never advises a setting the measurements rejected (`REJECTED`): raising the learning rate, dynamic
    sampling (MIXED_ONLY), WORKING_REWARD, EXACT_REWARD, NUM_ITERATIONS=2. A run that got worse is told they are
    suspects when set.
    """
    d, start = delta.delta, delta.initial
    band = max(flat, z * delta.noise) if delta.noise is not None else flat
    reward = (f"training reward {delta.initial:.2f} -> {delta.final:.2f} ({d * 100:+.1f} pp"
              + (f"; its noise +-{band * 100:.0f} pp" if delta.noise is not None else "") + ")")
    if tool_call_frequency is not None and tool_call_frequency == 0:
        return Diagnosis("no_tool_calls", (
            f"The model never called the `answer` tool ({reward}), so the environment scored nothing and every "
            "reward is 0. The bottleneck is format compliance, not difficulty: warm-start from an SFT checkpoint "
            "that emits <tool_call> blocks (notebook 02) and come back."))
    if change is not None:
        lo, hi = change.ci
        pair = (f"Held-out {change.change * 100:+.1f} points [{lo * 100:+.1f}, {hi * 100:+.1f}] on the same "
                f"{change.n} questions ({change.gained} gained, {change.lost} lost)")
        if lo > 0:
            return Diagnosis("improved", (
                f"{pair}: training improved the policy beyond the evaluation's noise. The {reward} is not the "
                "verdict: a step's reward is a few questions' rollouts and moves by chance; the paired held-out "
                "change decides. Keep the recipe; other seeds say how much it gains on average."))
        if hi < 0:
            return Diagnosis("worse", (
                f"{pair}: training made the policy worse on questions it never trained on. Read what the watch "
                "raised above (the probe, reply length, clipping, rewarded answers the judge calls wrong) and which "
                "sums were lost (below). A knob changed from the profile is the first suspect: measured worse were "
                f"{REJECTED} (docs/measurements.md)."))
        level = ""
        if start >= high:
            level = (f" The training reward started at {start:.2f}: most groups were all right, so there was little "
                     "to learn: a harder DATASET_CONFIG (more terms or digits).")
        elif start <= low:
            level = (f" The training reward started at {start:.2f}: few right answers to learn from: check the tool "
                     "calls (a notebook 02 warm start) or an easier DATASET_CONFIG.")
        return Diagnosis("within_noise", (
            f"{pair}: no change the evaluation can resolve (the interval contains 0).{level} One run is one draw: "
            "seeds of one recipe differ by several points (docs/results.md). If training stopped before MIN_STEPS, "
            "train the steps the recipe needs; otherwise another SEED, or more held-out questions (EVAL_N) for a "
            f"narrower interval, tells more than a changed knob. The {reward} does not decide it."))
    if abs(d) <= band:
        if start >= high:
            return Diagnosis("too_easy", (
                f"No evaluation after training; the {reward} did not move from a high start. The task is too easy: "
                "the model solves it before training. Make DATASET_CONFIG harder (more terms / digits)."))
        if start <= low:
            return Diagnosis("too_hard", (
                f"No evaluation after training; the {reward} did not move from a low start. Either the task is too "
                "hard for the model to ever stumble on a right answer (lower min_terms / min_digits), or the model "
                "rarely produces a valid <tool_call>: warm-start from notebook 02's SFT checkpoint."))
        return Diagnosis("reward_flat", (
            f"No evaluation after training; the {reward} moved no more than its own noise, so it cannot tell "
            "whether the policy changed. Evaluate before and after on the same held-out questions (section 12); if "
            "training stopped before MIN_STEPS, train the steps the recipe needs."))
    if d > 0:
        return Diagnosis("reward_rose", (
            f"No evaluation after training; the {reward} rose beyond its noise: the policy got better at the "
            "training questions as the reward pays them. Whether it learned the skill only a held-out evaluation "
            "says (the watch's probe is a small hint)."))
    return Diagnosis("reward_fell", (
        f"No evaluation after training; the {reward} fell beyond its noise. Read the watch's alarms (the probe, "
        "reply length, clipping): a collapse shows there. If a knob differs from the profile, go back to its value "
        f"(measured worse: {REJECTED}), and evaluate on held-out questions before concluding."))
