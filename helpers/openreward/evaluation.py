"""Evaluate a tool-calling policy on an ORS split, through the same adapter the trainer uses.

`OpenRewardSpec(target, split="test")` gives the held-out task list and the per-episode
environment TRL trains with. For each task this opens a session (`reset`), lets the model reply
greedily with the environment's tools in the prompt, runs every tool call it makes against the
server, feeds the results back, and stops when a tool says `finished` or the model stops calling
tools. The environment's own reward is the score; an episode that never earns one scores 0.

    result = evaluate_on_split(model, tokenizer, ors.url, split="test", n=30)
    print(result)              # accuracy, answered share, calculator use, by difficulty
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from dataclasses import dataclass, field

from helpers.chain_sum.evaluation import Summarized, generate_replies
from helpers.chain_sum.preflight import preflight
from helpers.compute.processes import on_main
from helpers.reporting.alarms import RunWatch, judge_arithmetic
from helpers.reporting.intervals import wilson_interval
from helpers.rollouts.tool_calls import parse_tool_calls, strip_tool_calls

def environment_tools(environment) -> list:
    """The environment's tool methods, collected the way GRPOTrainer collects them."""
    return [getattr(environment, name) for name, _ in inspect.getmembers(type(environment), inspect.isfunction)
            if name not in ("reset", "get_reward") and not name.startswith("_")]


def close_episode(environment) -> None:
    """Delete an `OpenRewardSpec` adapter's session on the server.

    TRL 1.16's adapter has no public close: its `_close()` is private only so that TRL does not offer it
    to the model as a tool. This is the one place that calls it."""
    environment._close()


@dataclass
class SplitEvalResult(Summarized):
    split: str
    n: int
    accuracy: float            # mean environment reward, unscored episodes counted as 0
    answered: float            # share of episodes the environment scored at all
    tool_use: dict             # tool name -> share of episodes that called it at least once
    by_difficulty: dict        # metadata "difficulty" -> accuracy (when the tasks carry one)
    accuracy_ci: tuple[float, float]
    tool_use_by_difficulty: dict = field(default_factory=dict)   # difficulty -> tool name -> share of episodes
    samples: list[dict] = field(default_factory=list)

    def tool_rate(self, tool: str, difficulty: str | None = None) -> float:
        """Share of episodes (of one difficulty, or all) that called `tool` at least once."""
        shares = self.tool_use if difficulty is None else self.tool_use_by_difficulty.get(difficulty, {})
        return shares.get(tool, 0.0)

    def __str__(self) -> str:
        lo, hi = self.accuracy_ci
        tools = ", ".join(f"{k} {v:.0%}" for k, v in sorted(self.tool_use.items()))
        diff = ", ".join(f"{k} {v:.0%}" + (f" (calculate {self.tool_rate('calculate', k):.0%})"
                                           if "calculate" in self.tool_use else "")
                         for k, v in self.by_difficulty.items())
        return (f"{self.split} split, n={self.n}: accuracy {self.accuracy:.1%} [{lo:.0%}, {hi:.0%}]  "
                f"answered {self.answered:.0%}  tool use: {tools or 'none'}" + (f"  by difficulty: {diff}" if diff else ""))


def play_episodes(model, tokenizer, rows, make_env, *, max_turns: int = 4, max_new_tokens: int = 96,
                  batch_size: int | None = None, system_prompt: str | None = None, precision: str | None = None,
                  temperature: float | None = None, progress: bool = True) -> list[dict]:
    """One multi-turn episode per task row, all played in lockstep; one sample dict per episode.

    Each episode opens a session (`make_env()`, `reset(**row)`), then each turn the model replies (greedy, or
    sampled at `temperature`), every tool call runs against the server and its result goes back, until a tool
    says `finished` or the model stops calling tools. A row repeated k times gives k independent episodes
    of that task (what `ors_sampler` samples for `helpers.chain_sum.preflight`)."""
    episodes = []
    for row in rows:
        env = make_env()
        prompt = [dict(m) for m in row["prompt"]]
        prompt[-1]["content"] += env.reset(**row)  # what TRL does with reset()'s string
        if system_prompt and prompt[0]["role"] != "system":
            prompt = [{"role": "system", "content": system_prompt}] + prompt
        episodes.append({"env": env, "messages": prompt, "calls": [], "done": False, "row": row})
    tools = environment_tools(episodes[0]["env"]) if episodes else []

    for _ in range(max_turns):
        active = [e for e in episodes if not e["done"]]
        if not active:
            break
        replies = generate_replies(model, tokenizer, [e["messages"] for e in active], tools=tools,
                                   max_new_tokens=max_new_tokens, batch_size=batch_size, precision=precision,
                                   temperature=temperature, progress=progress)
        for episode, reply in zip(active, replies):
            calls = parse_tool_calls(reply)
            text = strip_tool_calls(reply).replace("<|im_end|>", "").strip()
            if not calls:
                episode["messages"].append({"role": "assistant", "content": text})
                episode["done"] = True
                continue
            episode["messages"].append({"role": "assistant", "content": text, "tool_calls": [
                {"type": "function", "function": call} for call in calls]})
            for call in calls:
                method = getattr(episode["env"], call["name"], None)
                try:
                    if method is None or call["name"].startswith("_") or call["name"] == "reset":
                        raise ValueError(f"Tool {call['name']} not found.")
                    result = method(**call["arguments"])
                except Exception as exc:  # bad arguments go back to the model, as in training
                    result = {"error": str(exc)}
                episode["calls"].append(call["name"])
                episode["messages"].append({"role": "tool", "name": call["name"], "content": str(result)})
            episode["done"] = episode["env"].finished

    samples = []
    for episode in episodes:
        env = episode["env"]
        samples.append({"task": {k: v for k, v in episode["row"].items() if k != "prompt"},
                        "question": next(m["content"] for m in episode["messages"] if m["role"] == "user"),
                        "reward": env.reward, "score": float(env.reward or 0.0), "tool_calls": episode["calls"],
                        "messages": episode["messages"]})
        close_episode(env)
    return samples


def evaluate_on_split(model, tokenizer, target: str, *, split: str = "test", n: int = 30, max_turns: int = 4,
                      max_new_tokens: int = 96, batch_size: int | None = None, system_prompt: str | None = None,
                      precision: str | None = None, progress: bool = True) -> SplitEvalResult:
    """Greedy multi-turn episodes on the first `n` tasks of `split` of the ORS env at `target`.

    `system_prompt`, if given, is put before the task prompt, as the training data had it. `precision`:
    the trainer's (see `helpers.chain_sum.evaluation.generate_replies`), so before and after are comparable.
    Several processes (`accelerate launch`): the main process plays them, every process gets the result.
    """
    return on_main(_evaluate_on_split, model, tokenizer, target, split=split, n=n, max_turns=max_turns,
                   max_new_tokens=max_new_tokens, batch_size=batch_size, system_prompt=system_prompt,
                   precision=precision, progress=progress)


def _evaluate_on_split(model, tokenizer, target: str, *, split, n, max_turns, max_new_tokens, batch_size,
                       system_prompt, precision, progress) -> SplitEvalResult:
    from trl.experimental.openreward import OpenRewardSpec

    spec = OpenRewardSpec(target, split=split, num_tasks=n)
    samples = play_episodes(model, tokenizer, spec.train_dataset, spec.environment_factory,  # here a held-out split
                            max_turns=max_turns, max_new_tokens=max_new_tokens, batch_size=batch_size,
                            system_prompt=system_prompt, precision=precision, progress=progress)
    total = sum(s["score"] for s in samples)
    used = defaultdict(int)
    for s in samples:
        for name in set(s["tool_calls"]):
            used[name] += 1
    groups, calls = defaultdict(list), defaultdict(list)
    for s in samples:
        if s["task"].get("difficulty") is not None:
            groups[s["task"]["difficulty"]].append(s["score"])
            calls[s["task"]["difficulty"]].append(set(s["tool_calls"]))
    by_difficulty_tools = {d: {name: sum(name in c for c in cs) / len(cs) for name in used} for d, cs in sorted(calls.items())}
    return SplitEvalResult(
        split=split, n=len(samples), accuracy=total / len(samples),
        answered=sum(s["reward"] is not None for s in samples) / len(samples),
        tool_use={name: count / len(samples) for name, count in used.items()},
        by_difficulty={k: sum(v) / len(v) for k, v in sorted(groups.items())},
        tool_use_by_difficulty=by_difficulty_tools,
        accuracy_ci=wilson_interval(total, len(samples)), samples=samples)


def diagnose_tool_use(before: SplitEvalResult, after: SplitEvalResult, tool: str = "calculate",
                      difficulty: str = "hard") -> str:
    """One sentence on what happened to the use of `tool` (on `difficulty` tasks), and what to change if nothing did."""
    if not after.tool_use:
        return (f"The policy called no tool in any of the {after.n} test episodes after training, so the environment "
                "scored nothing: format is the bottleneck. Start from a warm start that calls tools (WARM_START=True).")
    rate_before, rate_after = before.tool_rate(tool, difficulty), after.tool_rate(tool, difficulty)
    seen = f"`{tool}` on {difficulty} tasks: {rate_before:.0%} of episodes before, {rate_after:.0%} after"
    if rate_before == rate_after == 0:
        return (f"{seen}. GRPO cannot discover a tool the policy never tries: warm-start with some calls to it "
                "(raise TEACHER_CALCULATE_SHARE).")
    if rate_after > rate_before:
        return f"{seen}: the policy learned from the reward alone to reach for `{tool}` more often."
    return (f"{seen}: no shift toward the tool. Train longer (TRAIN_MINUTES, MAX_STEPS), raise LEARNING_RATE, or "
            "raise NUM_GENERATIONS so more groups mix rollouts with and without it.")


def split_evaluator(model, tokenizer, target: str, *, split: str, settings, precision):
    """Notebook 04's evaluation, set up once: `evaluate()` scores `model` on the first `settings.eval_tasks`
    tasks of `split` (`evaluate_on_split`, `settings.max_tool_calling_iterations` tool turns plus the closing
    reply, `settings.eval_max_new_tokens` a turn), in the trainer's `precision`, so before and after compare.

    `evaluate(policy, n=9, progress=False)` scores another model (the one the trainer holds) on fewer tasks:
    the probe the alarms read while it trains."""
    if not split:
        raise ValueError("split: name the held-out ORS split to evaluate on (EVAL_SPLIT), e.g. 'test'")

    def evaluate(policy=None, *, n: int | None = None, progress: bool = True) -> SplitEvalResult:
        return evaluate_on_split(model if policy is None else policy, tokenizer, target, split=split,
                                 n=settings.eval_tasks if n is None else n,
                                 max_turns=settings.max_tool_calling_iterations + 1,
                                 max_new_tokens=settings.eval_max_new_tokens,
                                 precision=precision.precision, progress=progress)

    return evaluate


def show_model_prompt(tokenizer, environment, task_prompt: str, *, row: dict | None = None) -> str:
    """Print (and return) the full prompt the model sees for one task: the chat template over the task prompt with
    the environment's tools (their JSON schemas), thinking off as in training. Given the task `row` of the local
    calculator_env, also check that its answer is nowhere in it (AssertionError if it leaked)."""
    import re

    seen = tokenizer.apply_chat_template([{"role": "user", "content": task_prompt}],
                                         tools=environment_tools(environment), tokenize=False,
                                         add_generation_prompt=True, enable_thinking=False)
    print(seen)
    if row is not None:
        from calculator_env import true_answer

        assert str(true_answer(row)) not in re.findall(r"-?\d+", seen), "the answer leaked into the prompt"
        print("answer", true_answer(row), "is not in the prompt: the model has to compute it")
    return seen


def ors_sampler(model, tokenizer, spec, *, max_turns: int = 4, max_new_tokens: int = 96, batch_size: int | None = None,
                system_prompt: str | None = None, precision: str | None = None, progress: bool = False):
    """A sampler for `helpers.chain_sum.preflight.preflight` on an ORS environment through a
    `trl.experimental.openreward.OpenRewardSpec`; tasks are rows of `spec.train_dataset`. Multi-turn episodes
    (`play_episodes`); an episode is "parsed" when it made at least one tool call, and one the environment never
    scored gets 0."""

    def sample(rows: list[dict], k: int, temperature: float | None) -> list[list[dict]]:
        repeated = [row for row in rows for _ in range(k)]
        played = play_episodes(model, tokenizer, repeated, spec.environment_factory, max_turns=max_turns,
                               max_new_tokens=max_new_tokens, batch_size=batch_size, system_prompt=system_prompt,
                               precision=precision, temperature=temperature, progress=progress)
        episodes = [{"reward": s["score"], "parsed": bool(s["tool_calls"])} for s in played]
        return [episodes[i * k:(i + 1) * k] for i in range(len(rows))]

    return sample


def ors_preflight(model, tokenizer, spec, settings, precision):
    """Before GRPO: `settings.num_generations` sampled rollouts (at the training temperature) for each of the first
    `settings.preflight_n` training tasks, scored by the environment; prints and returns pass@k and the share of
    mixed groups (`helpers.chain_sum.preflight.Preflight`), or None when `settings.preflight_n` is 0. Several
    processes (`accelerate launch`): the main one samples, every process gets the result."""
    return on_main(_ors_preflight, model, tokenizer, spec, settings, precision)


def _ors_preflight(model, tokenizer, spec, settings, precision):
    if not settings.preflight_n:
        return None
    if settings.preflight_n > len(spec.train_dataset):
        raise ValueError(f"PREFLIGHT_N={settings.preflight_n} is more than the {len(spec.train_dataset)} training "
                         "tasks (NUM_TASKS): lower it, or 0 to skip the preflight")
    sample = ors_sampler(model, tokenizer, spec, max_turns=settings.max_tool_calling_iterations + 1,
                         max_new_tokens=settings.eval_max_new_tokens, precision=precision.precision, progress=True)
    result = preflight(sample, list(spec.train_dataset.select(range(settings.preflight_n))),
                       k=settings.num_generations, temperature=settings.temperature)
    print(result)
    return result


def watch_training(evaluate, settings):
    """The alarms while GRPO trains (`helpers.reporting.alarms.RunWatch`): every few steps `evaluate` (a
    `split_evaluator`) probes 9 held-out tasks (3 a difficulty), greedy; it raises an alarm if the training reward
    climbs while they fall, or if the tool calls vanish; the judge recomputes each answer from its question, for
    the gallery of rewarded rollouts that are wrong."""
    return RunWatch(probe=lambda m: evaluate(m, n=9, progress=False).accuracy,
                    probe_every=max(1, settings.max_steps // 3), judge=judge_arithmetic)
