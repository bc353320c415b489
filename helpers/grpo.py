"""GRPO-specific helpers for notebook 01: env-server sizing, the reward delta, and its diagnosis.

    sessions = env_sessions_needed(grpo_config)           # MAX_CONCURRENT_ENVS for the env server
    delta = reward_delta(trainer.state.log_history)       # the seed's before/after training reward
    print(diagnose(delta, tool_call_frequency=...).message)
"""

from __future__ import annotations

from dataclasses import dataclass

from helpers.prompts import SYSTEM_PROMPT

# Datasets the walkthrough names as drop-in swaps for chain_sum (any reasoning_gym name works).
SUGGESTED_DATASETS = ("chain_sum", "simple_equations", "letter_counting", "propositional_logic")

GENERIC_SYSTEM_PROMPT = """You are a careful reasoning assistant.
You will be given a problem. Solve it and submit your final answer.
Rules:
1. Read the question carefully.
2. Use the tool `answer` exactly once with your final answer.
3. The answer must be only the final answer, with no explanation.
"""


def env_sessions_needed(config, *, extra: int = 1) -> int:
    """How many env-server sessions a GRPO run opens at once, plus `extra` (the evaluation's).

    TRL 1.16 keeps a pool of `environment_factory` instances per process and grows it to the number
    of rollouts in one generation batch (each instance holds one WebSocket session). A generation
    batch is `per_device_train_batch_size * steps_per_generation` rollouts per process, and
    `GRPOConfig.generation_batch_size` is that times the number of processes: every session
    of every process. The server's MAX_CONCURRENT_ENVS must be at least this.
    """
    return int(config.generation_batch_size) + extra


def check_dataset_name(name: str) -> None:
    """Raise a ValueError listing the valid reasoning_gym dataset names unless `name` is one."""
    from reasoning_gym.factory import DATASETS

    if name not in DATASETS:
        import difflib

        close = difflib.get_close_matches(str(name), sorted(DATASETS), n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ValueError(f"Unknown DATASET_NAME {name!r}.{hint} Valid reasoning_gym names ({len(DATASETS)}): "
                         f"{', '.join(sorted(DATASETS))}")


def system_prompt_for(dataset_name: str) -> str:
    """The shared chain_sum SYSTEM_PROMPT (what notebook 02's checkpoint saw), else a generic one."""
    return SYSTEM_PROMPT if dataset_name == "chain_sum" else GENERIC_SYSTEM_PROMPT


@dataclass
class RewardDelta:
    """Mean training reward over the first and last `window` logged steps (the seed's metric)."""

    initial: float
    final: float
    delta: float
    window: int
    logged: int


def reward_delta(log_history: list[dict], key: str = "reward", window: int = 5) -> RewardDelta:
    """The seed's reward delta from `trainer.state.log_history`.

    The seed averages the first 5 and the last 5 logged rewards. Short runs log fewer entries, so
    the window shrinks to half of them (at least 1) and the two ends never overlap.
    """
    rewards = [float(entry[key]) for entry in log_history if entry.get(key) is not None]
    if not rewards:
        raise ValueError(f"No {key!r} in the log history: the trainer logged nothing (set logging_steps=1).")
    w = max(1, min(window, len(rewards) // 2))
    initial = sum(rewards[:w]) / w
    final = sum(rewards[-w:]) / w
    return RewardDelta(initial=initial, final=final, delta=final - initial, window=w, logged=len(rewards))


@dataclass
class Diagnosis:
    verdict: str  # healthy | too_easy | too_hard | no_tool_calls | past_saturation | flat
    message: str


def diagnose(delta: RewardDelta, *, tool_call_frequency: float | None = None, flat: float = 0.02,
             high: float = 0.9, low: float = 0.2) -> Diagnosis:
    """Read a reward delta the way the seed's section 10 does and say what to change.

    `flat` is how small |delta| must be to count as "no change"; `high` / `low` are the start
    rewards above / below which the task is too easy / too hard. `tool_call_frequency` (mean tool
    calls per rollout, TRL's `tools/call_frequency`) tells "the model never called the tool"
    apart from "it called it and was wrong".
    """
    d, start = delta.delta, delta.initial
    pp = f"{d * 100:+.1f} pp (reward {delta.initial:.2f} -> {delta.final:.2f})"
    if tool_call_frequency is not None and tool_call_frequency == 0:
        return Diagnosis("no_tool_calls", (
            f"Delta {pp}: the model never called the `answer` tool, so the environment scored nothing and "
            "every reward is 0. The bottleneck is format compliance, not difficulty: warm-start from an "
            "SFT checkpoint that emits <tool_call> blocks (notebook 02) and come back."))
    if d > flat:
        return Diagnosis("healthy", (
            f"Delta {pp}: healthy, the policy improved during training. Keep max_steps where the reward "
            "still climbs; stop when frac_reward_zero_std approaches 1."))
    if d < -flat:
        return Diagnosis("past_saturation", (
            f"Delta {pp}: negative. Training went past the point where it helped (or the learning rate is "
            "too high): once the reward plateaus, updates are mostly noise (plus the KL pull to the reference "
            "when beta > 0). Reduce max_steps or learning_rate."))
    if start >= high:
        return Diagnosis("too_easy", (
            f"Delta {pp}: no change with a high start. The task is too easy: the model solves it before "
            "training. Make DATASET_CONFIG harder (more terms / digits)."))
    if start <= low:
        return Diagnosis("too_hard", (
            f"Delta {pp}: no change with a low start. Either the task is too hard for the model to ever "
            "stumble on a right answer (lower min_terms / min_digits), or, if the reward stays near 0 even "
            "at the easiest setting, the model rarely produces a valid <tool_call>: format compliance is "
            "the bottleneck. Warm-start from notebook 02's SFT checkpoint."))
    return Diagnosis("flat", (
        f"Delta {pp}: no change from a middling start. The run was too short or too gentle for the "
        "reward to move: train more steps, raise learning_rate, or raise num_generations so more groups "
        "have a non-zero reward_std."))
