"""Check what a custom `rollout_func` and its reward functions hand to TRL's GRPOTrainer, at every call.

A rollout that returns one row too few, a mask one token short or a float among the token ids fails deep
inside the trainer (a tensor shape error, a KeyError in the reward kwargs), far from the line that caused it.
Wrapped, it fails at once with a `RolloutContractError` that names the key, the row and what TRL expects:

    trainer = GRPOTrainer(..., rollout_func=checked_rollout(rollout), reward_funcs=checked_rewards(reward_funcs))

The rules are what TRL 1.16 accepts (`GRPOTrainer._generate`, `_generate_and_score_completions` and
`_calculate_rewards` in trl/trainer/grpo_trainer.py), so valid output always passes, unchanged:

- `prompt_ids`, `completion_ids`, `logprobs` are required, one row per prompt (TRL passes each prompt
  `num_generations` times); ids are ints; a completion has at least one token (TRL reads its last one).
- `logprobs`: one per completion token; a value may be None (a token vLLM could not score). The whole key may be
  None (no sampling log-probabilities) unless vLLM's importance-sampling correction needs them.
- `env_mask` (optional, None allowed): one 0 or 1 per completion token.
- Any other key reaches the reward functions: a list is split one value per prompt (so it needs one per prompt);
  anything else reaches every prompt as it is.
- A reward function returns one float per completion, or None for one it cannot score. NaN and infinity are
  refused: TRL would read NaN as "cannot score", and an infinity turns its group's advantages into NaN.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import operator

REQUIRED_KEYS = ("prompt_ids", "completion_ids", "logprobs")


class RolloutContractError(ValueError):
    """A rollout_func or reward function returned something GRPOTrainer cannot use; the message says what and where."""


def callable_name(func) -> str:
    """The name TRL logs a reward function under (`rewards/<name>/mean`): a partial's function's, else
    `__name__`, else the class name of a callable instance (as trl.trainer.utils.get_callable_name)."""
    while isinstance(func, functools.partial):
        func = func.func
    return getattr(func, "__name__", type(func).__name__)


def _is_async(func) -> bool:
    while isinstance(func, functools.partial):
        func = func.func
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(getattr(type(func), "__call__", None))


def _rows(name: str, key: str, value, n: int) -> list:
    """`value` as a list of `n` rows, or the error that says why it is not."""
    if not isinstance(value, (list, tuple)):
        raise RolloutContractError(f"{name} returned {key!r} as {type(value).__name__}: TRL expects a list with one "
                                   f"row per prompt ({n} prompts in this call).")
    if len(value) != n:
        raise RolloutContractError(f"{name} returned {len(value)} rows of {key!r} for {n} prompts: TRL expects one "
                                   "row per prompt, in the order the prompts came (each prompt arrives "
                                   "num_generations times).")
    return value


def _row(name: str, key: str, i: int, row) -> list:
    if hasattr(row, "tolist") and not isinstance(row, (list, tuple)):   # a tensor or an array
        row = row.tolist()
    if not isinstance(row, (list, tuple)):
        raise RolloutContractError(f"{name} returned {key!r} row {i} as {type(row).__name__}: TRL expects a list "
                                   "of values, one per token.")
    return row


def _is_int(x) -> bool:
    if isinstance(x, bool):
        return False
    try:
        operator.index(x)   # ints, numpy integers, one-element integer tensors
    except TypeError:
        return False
    return True


def _is_number(x) -> bool:
    if isinstance(x, (str, bytes)):
        return False
    if isinstance(x, numbers.Real):
        return True
    try:
        float(x)   # numpy and one-element torch scalars
    except (TypeError, ValueError):
        return False
    return True


def check_rollout_output(output, n_prompts: int, *, name: str = "rollout_func", trainer=None) -> None:
    """Raise RolloutContractError when `output` (what a rollout_func returned for `n_prompts` prompts) breaks
    a rule of TRL's rollout contract (this module's docstring lists them); return None when it keeps them all."""
    if not isinstance(output, dict):
        raise RolloutContractError(f"{name} returned {type(output).__name__}: TRL expects a dict with the keys "
                                   f"{', '.join(REQUIRED_KEYS)} (one row per prompt) and any extra keys.")
    missing = [key for key in REQUIRED_KEYS if key not in output]
    if missing:
        raise RolloutContractError(
            f"{name} returned no {', '.join(repr(k) for k in missing)}: TRL expects the keys "
            f"{', '.join(REQUIRED_KEYS)}, each a list with one row per prompt (it returned: "
            f"{', '.join(repr(k) for k in output) or 'nothing'}).")
    prompt_ids = _rows(name, "prompt_ids", output["prompt_ids"], n_prompts)
    completion_ids = _rows(name, "completion_ids", output["completion_ids"], n_prompts)
    lengths = []
    for key, rows in (("prompt_ids", prompt_ids), ("completion_ids", completion_ids)):
        for i, row in enumerate(rows):
            row = _row(name, key, i, row)
            bad = next((j for j, x in enumerate(row) if not _is_int(x)), None)
            if bad is not None:
                raise RolloutContractError(f"{name} returned {key!r} row {i} with {row[bad]!r} "
                                           f"({type(row[bad]).__name__}) at position {bad}: TRL expects token ids, "
                                           "ints.")
            if key == "completion_ids":
                if not row:
                    raise RolloutContractError(f"{name} returned an empty 'completion_ids' row {i}: TRL expects at "
                                               "least one completion token per row (it reads the last one to see "
                                               "whether the completion ended with EOS).")
                lengths.append(len(row))

    if output["logprobs"] is None:
        if getattr(trainer, "use_vllm", False) and getattr(trainer, "vllm_importance_sampling_correction", False):
            raise RolloutContractError(
                f"{name} returned logprobs=None, but this trainer generates with vLLM and corrects for the "
                "difference between vLLM and the policy with them: return the sampler's log-probability of every "
                "completion token (generate_rollout_completions gives them), or set "
                "GRPOConfig(vllm_importance_sampling_correction=False).")
    else:
        for i, row in enumerate(_rows(name, "logprobs", output["logprobs"], n_prompts)):
            row = _row(name, "logprobs", i, row)
            if len(row) != lengths[i]:
                raise RolloutContractError(f"{name} returned {len(row)} logprobs for the {lengths[i]} completion_ids "
                                           f"of row {i}: TRL expects one log-probability per completion token "
                                           "(0.0 for tokens the model did not sample).")
            bad = next((j for j, x in enumerate(row) if x is not None and not _is_number(x)), None)
            if bad is not None:
                raise RolloutContractError(f"{name} returned 'logprobs' row {i} with {row[bad]!r} at position {bad}: "
                                           "TRL expects floats (None for a token that could not be scored).")

    if output.get("env_mask") is not None:
        for i, row in enumerate(_rows(name, "env_mask", output["env_mask"], n_prompts)):
            row = _row(name, "env_mask", i, row)
            if len(row) != lengths[i]:
                raise RolloutContractError(f"{name} returned {len(row)} env_mask values for the {lengths[i]} "
                                           f"completion_ids of row {i}: TRL expects one per completion token.")
            bad = next((j for j, x in enumerate(row) if isinstance(x, (str, bytes)) or x not in (0, 1)), None)
            if bad is not None:
                raise RolloutContractError(f"{name} returned env_mask row {i} with {row[bad]!r} at position {bad}: "
                                           "TRL expects 1 for a token the model produced (trained) and 0 for one it "
                                           "did not (left out of the loss).")

    for key, value in output.items():
        if key not in REQUIRED_KEYS and key != "env_mask" and isinstance(value, list) and len(value) != n_prompts:
            raise RolloutContractError(
                f"{name} returned the extra key {key!r} with {len(value)} values for {n_prompts} prompts: TRL hands "
                "value i of a list to the reward functions for prompt i, so it needs one value per prompt (a value "
                "that is not a list reaches every prompt as it is).")


def checked_rollout(rollout_func):
    """`rollout_func`, checked: each call's output goes through `check_rollout_output` before TRL sees it."""
    name = callable_name(rollout_func)

    @functools.wraps(rollout_func, updated=())
    def rollout(prompts, trainer):
        output = rollout_func(prompts, trainer)
        check_rollout_output(output, len(prompts), name=name, trainer=trainer)
        return output

    rollout.__name__ = name
    return rollout


def check_rewards(rewards, n: int | None, name: str) -> None:
    """Raise RolloutContractError unless `rewards` (what reward function `name` returned) is one float or None for
    each of the `n` completions (None: do not check the count)."""
    if isinstance(rewards, (str, bytes, dict)) or not hasattr(rewards, "__len__") or not hasattr(rewards, "__iter__"):
        raise RolloutContractError(f"reward function {name!r} returned {type(rewards).__name__}: TRL expects a list "
                                   "with one float (or None) per completion.")
    if n is not None and len(rewards) != n:
        raise RolloutContractError(f"reward function {name!r} returned {len(rewards)} rewards for {n} completions: "
                                   "TRL expects one float (or None) per completion, in order.")
    for i, value in enumerate(rewards):
        if value is None:
            continue
        if not _is_number(value):
            raise RolloutContractError(f"reward function {name!r} returned {value!r} ({type(value).__name__}) for "
                                       f"completion {i}: TRL expects one float per completion, or None for one it "
                                       "cannot score.")
        if not math.isfinite(float(value)):
            raise RolloutContractError(f"reward function {name!r} returned {float(value)} for completion {i}: TRL "
                                       "expects a finite float, or None for a completion it cannot score.")


def _completions_count(args, kwargs) -> int | None:
    """How many completions this call scores: TRL passes `completions=` (a direct call passes them first)."""
    completions = kwargs["completions"] if "completions" in kwargs else args[0] if args else kwargs.get("prompts")
    try:
        return len(completions)
    except TypeError:
        return None


def _checked_reward(func, label: str | None = None):
    if isinstance(func, str) or not callable(func) or hasattr(func, "forward"):   # a reward model: TRL runs it
        return func
    name = label or callable_name(func)
    if _is_async(func):
        @functools.wraps(func, updated=())
        async def reward(*args, **kwargs):
            rewards = await func(*args, **kwargs)
            check_rewards(rewards, _completions_count(args, kwargs), name)
            return rewards
    else:
        @functools.wraps(func, updated=())
        def reward(*args, **kwargs):
            rewards = func(*args, **kwargs)
            check_rewards(rewards, _completions_count(args, kwargs), name)
            return rewards
    reward.__name__ = getattr(func, "__name__", name)   # TRL logs rewards/<name>/mean: the same name as unwrapped
    return reward


def checked_rewards(reward_funcs):
    """Each reward function, checked at each call by `check_rewards`; a list stays a list, one function stays one.
    Reward models (a Hub id or a model) pass through unchanged: TRL scores with them itself."""
    if isinstance(reward_funcs, (list, tuple)):
        return [_checked_reward(func) for func in reward_funcs]
    return _checked_reward(reward_funcs)


def checked_environment(environment_class):
    """`environment_class` (an `environment_factory` class) with its `get_reward()` checked at each call: one finite
    float, or None for a rollout it cannot score, else a RolloutContractError naming `<Class>.get_reward`. A subclass
    of the same name, so TRL logs its reward under the same `rewards/<Class>/mean`; its tools are the class's own."""
    get_reward = getattr(environment_class, "get_reward", None)
    if get_reward is None:
        return environment_class
    name = f"{environment_class.__name__}.get_reward"

    if _is_async(get_reward):
        async def checked_get_reward(self):
            reward = await get_reward(self)
            check_rewards([reward], 1, name)
            return reward
    else:
        def checked_get_reward(self):
            reward = get_reward(self)
            check_rewards([reward], 1, name)
            return reward
    checked_get_reward.__doc__ = get_reward.__doc__
    return type(environment_class.__name__, (environment_class,),
                {"get_reward": checked_get_reward, "__module__": environment_class.__module__,
                 "__qualname__": environment_class.__qualname__, "__doc__": environment_class.__doc__})
