"""Teacher episodes on an ORS environment, for an SFT warm start (notebook 04).

A teacher model (any OpenAI-compatible chat endpoint: the local stand-in of `helpers.chain_sum.local_teacher`, vLLM,
gpt-5-mini) plays tasks of an ORS environment through the real protocol: the `openreward` client opens one
session per task, reads its prompt, offers the environment's own tools to the teacher, runs every tool call
the teacher makes on the server, and stops when a tool says `finished`. The environment's reward says which
episodes to keep; the kept ones become SFT rows in the layout GRPO and the evaluation use.

    episodes = collect_ors_episodes(ors_url, Teacher.endpoint(teacher_url, "arithmetic-teacher"), n=240)
    kept = [e for e in episodes if e.reward == 1.0]
    check_warm_start_data(kept, collected=len(episodes))   # a clear error before SFT sees nothing useful
    rows = [to_sft_row(e, tools_json) for e in kept]
"""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from helpers.chain_sum.sft_data import Teacher
from helpers.compute.processes import one_server


class WarmStartDataError(RuntimeError):
    """The teacher episodes cannot give the warm start this notebook needs; the message names the knob."""


@dataclass
class TeacherEpisode:
    """One task played by the teacher: the conversation (OpenAI format) and what the environment said."""

    task: dict
    messages: list[dict]
    reward: float | None          # the last non-null reward of the episode's tool results
    finished: bool
    tools_called: list[str] = field(default_factory=list)
    error: str | None = None      # why the episode stopped early (a teacher or server failure)

    @property
    def called_calculate(self) -> bool:
        return "calculate" in self.tools_called


def ors_tools_for_openai(tool_specs) -> list[dict]:
    """The ORS environment's tool specs (name, description, JSON schema) as OpenAI chat `tools`."""
    return [{"type": "function", "function": {"name": t.name, "description": t.description or "",
                                              "parameters": t.input_schema or {"type": "object", "properties": {}}}}
            for t in tool_specs]


def _play(sdk_env, chat, model: str, split: str, index: int, tools: list[dict], system_prompt: str | None,
          max_turns: int) -> TeacherEpisode:
    task = sdk_env.get_task(split, index).task_spec
    messages, reward, finished, called = [], None, False, []
    try:
        with sdk_env.session(split=split, index=index) as session:
            prompt = "\n".join(b.text for b in session.get_prompt() if b.type == "text")
            messages = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
                {"role": "user", "content": prompt}]
            for _ in range(max_turns):
                reply = chat.chat.completions.create(model=model, messages=messages, tools=tools).choices[0].message
                calls = [{"type": "function", "function": {"name": c.function.name,
                                                           "arguments": c.function.arguments}}
                         for c in reply.tool_calls or []]
                if finished:   # the episode is over: the teacher's closing words (no more calls) end it
                    messages.append({"role": "assistant", "content": reply.content or ""})
                    break
                messages.append({"role": "assistant", "content": reply.content or "", **({"tool_calls": calls}
                                                                                          if calls else {})})
                if not calls:
                    break
                for call in calls:
                    name = call["function"]["name"]
                    called.append(name)
                    out = session.call_tool(name, json.loads(call["function"]["arguments"] or "{}"))
                    text = "\n".join(b.text for b in out.blocks if b.type == "text")
                    messages.append({"role": "tool", "name": name, "content": text})
                    reward = out.reward if out.reward is not None else reward
                    finished = finished or bool(out.finished)
    except Exception as exc:  # one broken episode is reported, not fatal; check_warm_start_data counts them
        return TeacherEpisode(task, messages, reward, finished, called, error=f"{type(exc).__name__}: {exc}")
    return TeacherEpisode(task, messages, reward, finished, called)


def collect_ors_episodes(target: str, teacher, *, n: int, split: str = "train", env_name: str = "CalculatorEnv",
                         system_prompt: str | None = None, max_turns: int = 4, workers: int = 8,
                         progress: bool = True) -> list[TeacherEpisode]:
    """The teacher plays the first `n` tasks of `split` of the ORS environment at `target` (a URL).

    `teacher`: a `helpers.chain_sum.sft_data.Teacher` (an OpenAI-compatible endpoint, or OpenAI itself). Episodes run
    `workers` at a time, each in its own ORS session; the result is in task order.
    """
    from openreward import OpenReward
    from tqdm.auto import tqdm

    chat = teacher.chat_client()
    client = OpenReward(base_url=target)
    try:
        sdk_env = client.environments.get(env_name)
        available = sdk_env.num_tasks(split)
        if n > available:
            raise WarmStartDataError(f"{target} has {available} {split!r} tasks; asked for {n}: lower the "
                                     "number of teacher episodes (TEACHER_EPISODES).")
        tools = ors_tools_for_openai(sdk_env.list_tools())
        with ThreadPoolExecutor(workers) as pool:
            jobs = [pool.submit(_play, sdk_env, chat, teacher.model, split, i, tools, system_prompt, max_turns)
                    for i in range(n)]
            episodes = [job.result() for job in tqdm(jobs, desc="teacher episodes", disable=not progress)]
    finally:
        client.close()
    return episodes


def describe_episodes(episodes: list[TeacherEpisode]) -> dict:
    """Counts a learner reads before SFT: rewarded, with a `calculate` call, per difficulty, failures."""
    kept = [e for e in episodes if e.reward == 1.0]
    by_difficulty = Counter(e.task.get("difficulty") for e in kept)
    return {"episodes": len(episodes), "rewarded": len(kept),
            "rewarded_with_calculate": sum(e.called_calculate for e in kept),
            "teacher_calculate_share": sum(e.called_calculate for e in episodes) / max(1, len(episodes)),
            "unscored": sum(e.reward is None for e in episodes), "errors": sum(e.error is not None for e in episodes),
            "rewarded_by_difficulty": dict(sorted(by_difficulty.items()))}


def check_warm_start_data(kept: list[TeacherEpisode], *, collected: int, episodes: list[TeacherEpisode] = (),
                          min_examples: int = 8) -> None:
    """Stop before SFT when the kept episodes cannot teach a mixed policy: too few, or no `calculate` call
    among them (the student would never learn the tool exists), or only `calculate` calls (nothing left for
    GRPO to discover). The message says which knob to change."""
    errors = [e.error for e in episodes if e.error]
    if len(kept) < min_examples:
        why = f" {len(errors)} episodes failed, e.g. {errors[0]}." if errors else ""
        raise WarmStartDataError(
            f"Only {len(kept)} of {collected} teacher episodes earned reward 1 (SFT needs at least {min_examples})."
            f"{why} Check that the teacher answers with the environment's tools (the samples above), lower "
            f"TEACHER_MISTAKE_RATE, or raise TEACHER_EPISODES.")
    with_calculate = sum(e.called_calculate for e in kept)
    if with_calculate == 0:
        raise WarmStartDataError(
            f"None of the {len(kept)} kept teacher episodes calls `calculate`, so the student would never learn the "
            f"tool exists and GRPO could not discover that it pays. Raise TEACHER_CALCULATE_SHARE (e.g. 0.3), or use "
            f"a teacher that calls the environment's `calculate` tool.")
    if with_calculate == len(kept):
        raise WarmStartDataError(
            f"All {len(kept)} kept teacher episodes call `calculate`: the warm start would already always use it, and "
            f"there is nothing left for GRPO to learn. Lower TEACHER_CALCULATE_SHARE (e.g. 0.3).")


def to_sft_row(episode: TeacherEpisode, tools_json: str) -> dict:
    """An SFT row: the whole conversation, the teacher's closing words after the environment's verdict included
    (so the student learns to stop there: GRPO generates once more after the last tool result), tool-call
    arguments as JSON strings (Arrow would merge the structs), and the tools as the trainer shows them
    (`tools_json`: a JSON list of schemas). SFT trains the assistant turns only."""
    messages = list(episode.messages)
    while messages and messages[-1]["role"] != "assistant":
        messages.pop()
    return {"messages": messages, "tools": tools_json}


@dataclass
class WarmStartData:
    """What the teacher left for the warm start: every episode, the rewarded ones SFT trains on, the counts for
    the run record, and the local teacher's server (None for an endpoint or no warm start), stopped by `stop()`."""

    episodes: list[TeacherEpisode] = field(default_factory=list)
    kept: list[TeacherEpisode] = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    teacher_server: object = None

    def stop(self) -> None:
        """Stop the local teacher's server, if one was started."""
        if self.teacher_server is not None:
            self.teacher_server.stop()
            self.teacher_server = None


def show_episode(episode: TeacherEpisode) -> None:
    """Print one teacher episode as the model will learn it: each message, with its tool calls."""
    print(f"\n{episode.task['difficulty']} task, reward {episode.reward}:")
    for message in episode.messages:
        calls = [f"{c['function']['name']}({c['function']['arguments']})" for c in message.get("tool_calls", [])]
        print(f"  [{message['role']}] {message['content']!r}" + (f" -> {', '.join(calls)}" if calls else ""))


def play_teacher(target: str, settings, *, endpoint: str | None = None, model: str = "arithmetic-teacher",
                 seed: int = 0, split: str = "train") -> WarmStartData:
    """Notebook 04's teacher episodes: when `settings.warm_start`, a teacher plays `settings.teacher_episodes`
    tasks of `split` through ORS and the environment's reward picks the episodes SFT keeps.

    The teacher is the OpenAI-compatible `endpoint` (serving `model`), or, when None, the local stand-in
    (`helpers.chain_sum.local_teacher`, started here: it calls `calculate` in `settings.teacher_calculate_share`
    of the tasks and errs at `settings.teacher_mistake_rate` when it does not). Prints the counts and one kept
    episode with `calculate` and one without. A catalog `target` (no URL) raises ValueError: the teacher plays on
    an ORS server by URL; the kept episodes failing `check_warm_start_data` raise WarmStartDataError. Several
    processes (`accelerate launch`): the main one plays, every process gets the episodes (the server stays with it)."""
    data, server = one_server(_play_teacher, target, settings, endpoint=endpoint, model=model, seed=seed, split=split)
    data.teacher_server = server
    return data


def _play_teacher(target: str, settings, *, endpoint: str | None, model: str, seed: int, split: str):
    """(the teacher's data without its server, the server): the server is not sent to the other processes."""
    if not settings.warm_start:
        print("WARM_START=False: training starts from", settings.model, "as it is")
        return WarmStartData(), None
    if "://" not in target:
        raise ValueError(f"WARM_START plays teacher episodes on an ORS server by URL (the local calculator_env or "
                         f"your own); for the catalog environment {target!r} set WARM_START=False (the gpu "
                         f"profile's choice).")
    data = WarmStartData()
    if endpoint:
        teacher = Teacher.endpoint(endpoint, model)
    else:
        teacher, data.teacher_server = Teacher.start_local(
            model, calculate_share=settings.teacher_calculate_share, seed=seed,
            mistake_rate=settings.teacher_mistake_rate)
    data.episodes = collect_ors_episodes(target, teacher, n=settings.teacher_episodes, split=split)
    data.kept = [e for e in data.episodes if e.reward == 1.0]   # the environment's verdict is the filter
    data.stats = describe_episodes(data.episodes)
    print(data.stats)
    check_warm_start_data(data.kept, collected=len(data.episodes), episodes=data.episodes)   # clear error + knob
    show_episode(next(e for e in data.kept if e.called_calculate))
    show_episode(next(e for e in data.kept if not e.called_calculate))
    server, data.teacher_server = data.teacher_server, None
    return data, server


def sft_warm_start(sft_class, sft_config, model, tokenizer, data: WarmStartData, tools: list, *, settings) -> float:
    """SFT (`sft_class`: TRL's SFTTrainer or FastSFTTrainer, with the notebook's `sft_config`) on the kept teacher
    episodes; returns its seconds (0.0 without a warm start, when nothing is trained).

    Each episode becomes a conversation with `tools` (the spec adapter's methods, so the tools render exactly as
    the trainer will show them), the loss on the assistant turns only. The model is trained in place; prints the
    steps, seconds and final loss."""
    import time

    from datasets import Dataset
    from transformers.utils import get_json_schema
    from trl import SFTTrainer

    if not settings.warm_start:
        return 0.0
    if not (isinstance(sft_class, type) and issubclass(sft_class, SFTTrainer)):
        raise TypeError(f"sft_class must be SFTTrainer or a subclass (FastSFTTrainer), not {sft_class!r}")
    if not data.kept:
        raise ValueError("the warm start has no kept teacher episodes to train on: run play_teacher first "
                         "(with WARM_START on), or set WARM_START=False")
    tools_json = json.dumps([get_json_schema(tool) for tool in tools])
    sft_dataset = Dataset.from_list([to_sft_row(e, tools_json) for e in data.kept])
    sft = sft_class(model=model, processing_class=tokenizer, train_dataset=sft_dataset, args=sft_config)
    started = time.perf_counter()
    sft.train()
    seconds = time.perf_counter() - started
    print(f"SFT: {len(sft_dataset)} episodes, {sft.state.global_step} steps in {seconds:.0f} s, "
          f"final loss {sft.state.log_history[-1].get('train_loss', float('nan')):.3f}")
    return seconds
