"""One rollout, readable: what the model saw, the tool call it made, what the environment replied, the reward.

    show_rollout(*last_rollout(trainer))       # one of the trainer's own rollouts from its last step
    show_rollout(messages, reward)             # any chat: a teacher episode, an evaluation reply

Every notebook prints one of these before its numbers, because this is what RL optimizes: the reward
of a whole conversation in which the model called a tool and the environment answered.
"""

from __future__ import annotations

import json

from helpers.rollouts.tool_calls import parse_tool_calls, strip_tool_calls


def compact(text, limit: int = 160) -> str:
    """`text` on one line: whitespace runs collapsed, cut at `limit` characters. A reply of only newlines
    (what an untrained model often writes) shows as such instead of as a screenful of blank lines."""
    text = "" if text is None else str(text)
    flat = " ".join(text.split())
    if not flat:
        return f"(blank: {len(text)} whitespace characters)" if text else "(empty)"
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def tool_calls_of(message: dict) -> list[dict]:
    """A message's tool calls as {"name", "arguments"}: parsed by TRL (`tool_calls`) or still in the text."""
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function", call)
        args = function.get("arguments", {})
        calls.append({"name": function.get("name"), "arguments": json.loads(args) if isinstance(args, str) else args})
    return calls or parse_tool_calls(message.get("content") or "")


def called_a_tool(messages: list[dict]) -> bool:
    return any(m.get("role") == "tool" or (m.get("role") == "assistant" and tool_calls_of(m)) for m in messages)


def rollout_text(messages: list[dict], reward, limit: int = 160) -> str:
    """The lines `show_rollout` prints. `reward`: a number, or {reward function name: value}."""
    lines = []
    for message in messages:
        role, content = message.get("role"), message.get("content") or ""
        if role == "system":
            lines.append(f"system    │ {compact(content, 70)}")
        elif role == "user":
            lines.append(f"prompt    │ {compact(content, limit)}")
        elif role == "assistant":
            calls = tool_calls_of(message)
            text = strip_tool_calls(content) if calls else content
            if text.strip() or not calls:
                lines.append(f"model     │ {compact(text, limit)}")
            for call in calls:
                args = ", ".join(f"{k}={v!r}" for k, v in (call["arguments"] or {}).items())
                lines.append(f"tool call │ {call['name']}({compact(args, limit)})")
        elif role == "tool":
            lines.append(f"env reply │ {compact(content, limit)}")
    if not called_a_tool(messages):
        lines.append("tool call │ (none: the model did not call a tool)")
    if isinstance(reward, dict):
        reward = "  ".join(f"{name} {value:+.2f}" for name, value in reward.items())
    elif isinstance(reward, (int, float)):
        reward = f"{reward:+.2f}"
    lines.append(f"reward    │ {reward}")
    return "\n".join(lines)


def show_rollout(messages: list[dict], reward, limit: int = 160) -> None:
    """Print one rollout compactly: prompt → model text and tool call → environment reply → reward."""
    print(rollout_text(messages, reward, limit))


def batch_rollouts(trainer) -> list[tuple[list[dict], dict[str, float]]]:
    """Every rollout of the trainer's last generation batch: (prompt + completion messages, each reward
    function's value).

    GRPOTrainer keeps the last batch's prompts, completions and rewards in `trainer._logs` (what
    `log_completions=True` prints as a table); with tools, a completion is the list of assistant and tool messages.
    """
    logs = trainer._logs
    def as_messages(item, role):
        return [{"role": role, "content": item}] if isinstance(item, str) else list(item)
    return [(as_messages(p, "user") + as_messages(c, "assistant"),
             {name: values[i] for name, values in logs["rewards"].items()})
            for i, (p, c) in enumerate(zip(logs["prompt"], logs["completion"]))]


def last_rollout(trainer) -> tuple[list[dict], dict[str, float]]:
    """One rollout of the trainer's last generation batch (`batch_rollouts`), one that called a tool when there is one."""
    rollouts = batch_rollouts(trainer)
    if not rollouts:
        raise ValueError("the trainer has not generated anything yet: call trainer.train() first")
    return next((r for r in rollouts if called_a_tool(r[0])), rollouts[0])


def sample_rollout(sample: dict) -> tuple[list[dict], float]:
    """An evaluation sample (`helpers.chain_sum.evaluation.evaluate_policy`) as a rollout: the question, the model's reply,
    and, when the reply called `answer`, the environment's verdict in the words the training tool returns."""
    messages = [{"role": "user", "content": sample["question"]}, {"role": "assistant", "content": sample["reply"]}]
    if sample.get("answer") is not None:
        messages.append({"role": "tool", "content": f"score={sample['score']} correct={sample['correct_answer']}"})
    return messages, sample["score"]
