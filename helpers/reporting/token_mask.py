"""Which tokens of a rollout the loss trains on, shown: the model's, the environment's, the prompt's.

In a multi-turn rollout the completion holds the model's turns AND the environment's replies (tool results,
game feedback). GRPO must train on the first and mask the second; a mask that is off by a turn trains the
model to write the environment's text. `TokenMask` renders one rollout token by token in three colours
(HTML in a notebook, labelled segments in a terminal), beside the checks that make the picture true:

- the chat template is prefix-preserving: laying out turns 1..k+1 leaves turns 1..k's text unchanged, so the
  ids the trainer builds by appending turn after turn (TRL appends each tool result to the ids it has) read as
  the chat the model is shown;
- every tool call the model made parses (a call that does not parse never reaches the environment).

    mask = mask_from_ids(tokenizer, prompt_ids, completion_ids, env_mask)   # a rollout_func's own mask (03)
    mask = mask_from_messages(tokenizer, messages, n_prompt=2, tools=[...])  # rebuilt from the chat (01)
    display(mask)    # colours in Jupyter; print(mask) in a terminal
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from helpers.rollouts.tool_calls import parse_tool_calls
from helpers.reporting.show import last_rollout

KINDS = {"prompt": ("PROMPT (not trained)", "#eeeeee"), "model": ("MODEL (trained)", "#c8f0cf"),
         "env": ("ENV (masked)", "#ffd9a8")}


@dataclass
class TokenMask:
    """One rollout as (kind, text, tokens) segments, kind "prompt" | "model" | "env", and named checks."""

    segments: list[tuple[str, str, int]]
    checks: dict[str, bool] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        totals = dict.fromkeys(KINDS, 0)
        for kind, _, n in self.segments:
            totals[kind] += n
        return totals

    def __str__(self) -> str:
        lines = [f"{KINDS[kind][0]}, {n} tokens ▸ {_shorten(text) if kind == 'prompt' else text}"
                 for kind, text, n in self.segments]
        counts = self.counts()
        lines.append(f"trained {counts['model']} tokens, masked {counts['env']}, prompt {counts['prompt']}")
        lines += [f"{'✓' if ok else '✗'} {name}" for name, ok in self.checks.items()]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        spans = "".join(f'<span title="{KINDS[kind][0]}, {n} tokens" style="background:{KINDS[kind][1]};'
                        f'white-space:pre-wrap">{html.escape(text)}</span>' for kind, text, n in self.segments)
        legend = " ".join(f'<span style="background:{colour};padding:0 4px">{label}: {self.counts()[kind]} tokens</span>'
                          for kind, (label, colour) in KINDS.items())
        checks = "<br>".join(f"{'✓' if ok else '✗'} {html.escape(name)}" for name, ok in self.checks.items())
        return (f'<div style="font-family:monospace;font-size:12px">{legend}<div style="margin:6px 0;'
                f'border:1px solid #ccc;padding:6px">{spans}</div>{checks}</div>')


def _shorten(text: str, head: int = 160, tail: int = 120) -> str:
    """A long prompt (system prompt, tool schema) cut in the middle for a terminal; the HTML view keeps it whole."""
    return text if len(text) <= head + tail + 40 else f"{text[:head]} [... {len(text) - head - tail:,} characters ...] {text[-tail:]}"


def _segments(tokenizer, ids: list[int], kinds: list[str]) -> list[tuple[str, str, int]]:
    """Consecutive tokens of one kind joined into a decoded segment."""
    segments, start = [], 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or kinds[i] != kinds[start]:
            segments.append((kinds[start], tokenizer.decode(ids[start:i]), i - start))
            start = i
    return segments


def mask_from_ids(tokenizer, prompt_ids: list[int], completion_ids: list[int], env_mask: list[int],
                  checks: dict[str, bool] | None = None) -> TokenMask:
    """A rollout_func's own output: `env_mask` 1 = the model's token (trained), 0 = the environment's."""
    if len(completion_ids) != len(env_mask):
        raise ValueError(f"completion_ids ({len(completion_ids)}) and env_mask ({len(env_mask)}) differ in length")
    kinds = ["prompt"] * len(prompt_ids) + ["model" if m else "env" for m in env_mask]
    all_checks = {"env_mask has one 0/1 per completion token": set(env_mask) <= {0, 1}, **(checks or {})}
    return TokenMask(_segments(tokenizer, list(prompt_ids) + list(completion_ids), kinds), all_checks)


def _template_ids(tokenizer, messages: list[dict], tools, generation_prompt: bool, chat_template=None,
                  template_kwargs: dict | None = None) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, chat_template=chat_template,
                                        add_generation_prompt=generation_prompt, return_dict=False,
                                        **(template_kwargs or {}))
    return list(ids["input_ids"] if isinstance(ids, dict) else ids)


def _template_text(tokenizer, messages: list[dict], tools, generation_prompt: bool, chat_template=None,
                   template_kwargs: dict | None = None) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, chat_template=chat_template,
                                         add_generation_prompt=generation_prompt, **(template_kwargs or {}))


def prefix_preserving(tokenizer, chat_template=None) -> bool:
    """Does `chat_template` (None: the tokenizer's) lay out a user/assistant exchange with the same tokens once
    another turn follows? (TRL's own test, without tools: what a rollout_func's environment turns rely on.)"""
    exchange = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "dummy"}]
    alone = _template_ids(tokenizer, exchange, None, False, chat_template)
    followed = _template_ids(tokenizer, exchange + [{"role": "user", "content": "more"}], None, True, chat_template)
    eos = [i for i, token in enumerate(alone) if token == tokenizer.eos_token_id]
    alone = alone[: eos[-1] + 1] if eos else alone   # templates add a newline after the closing token
    return followed[: len(alone)] == alone


def tool_calls_parse(message: dict) -> bool:
    """An assistant turn's tool calls are well formed: structured `tool_calls` with a name and dict arguments,
    or `<tool_call>` text that `helpers.rollouts.tool_calls.parse_tool_calls` reads, one call per tag."""
    calls = message.get("tool_calls")
    if calls:
        return all(isinstance(c.get("function", c).get("name"), str)
                   and isinstance(c.get("function", c).get("arguments", {}), (dict, str)) for c in calls)
    content = message.get("content") or ""
    return content.count("<tool_call>") == len(parse_tool_calls(content))


def mask_from_messages(tokenizer, messages: list[dict], *, n_prompt: int, tools=None, chat_template=None,
                       template_kwargs: dict | None = None) -> TokenMask:
    """A rollout given as chat messages (TRL's environment_factory keeps them), laid out as the trainer builds it:
    the prompt's tokens, then each turn's tokens appended (TRL concatenates the ids it generated with each tool
    result's, never re-tokenizing the whole chat). The first `n_prompt` messages are the prompt; assistant turns
    are the model's tokens (up to its end-of-turn token), tool turns the environment's (the rest: what the
    template adds around the reply and the next turn's generation prompt). A turn's text is what the chat
    template adds for it; the prefix check says whether that attribution holds.

    `chat_template`: the one the trainer used. GRPOTrainer swaps a template that is not prefix-preserving (Qwen3's
    drops earlier turns' thinking) for a training one, `trainer.chat_template`; None: the tokenizer's.
    `template_kwargs`: the trainer's `chat_template_kwargs` (e.g. enable_thinking=False, which puts the empty
    thinking block in the prompt, where the model did not write it)."""
    eos = tokenizer.eos_token or ""
    ids: list[int] = []
    kinds: list[str] = []
    rendered, carried, preserving = "", "", True
    for k in range(n_prompt, len(messages) + 1):
        generation_prompt = k < len(messages) and messages[k]["role"] == "assistant"
        upto = _template_text(tokenizer, messages[:k], tools, generation_prompt, chat_template, template_kwargs)
        preserving = preserving and upto.startswith(rendered)
        text, rendered = carried + upto[len(rendered):], upto
        kind = "prompt" if k == n_prompt else ("model" if messages[k - 1]["role"] == "assistant" else "env")
        carried = ""
        if kind == "model" and eos and eos in text:   # the model stops at its end-of-turn token; what the template
            cut = text.rindex(eos) + len(eos)          # writes after it belongs to the next turn (as in TRL)
            text, carried = text[:cut], text[cut:]
        new = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids, kinds = ids + new, kinds + [kind] * len(new)
    checks = {"the chat template is prefix-preserving (each turn's text stays as it was)": preserving,
              "every tool call the model made parses": all(tool_calls_parse(m) for m in messages[n_prompt:]
                                                           if m["role"] == "assistant")}
    return TokenMask(_segments(tokenizer, ids, kinds), checks)


def mask_of_last_rollout(trainer) -> TokenMask:
    """One rollout of a GRPOTrainer's last batch (environment_factory: one that called a tool), laid out with the
    chat template and tools the trainer used."""
    messages, _ = last_rollout(trainer)
    n_prompt = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    return mask_from_messages(trainer.processing_class, messages, n_prompt=n_prompt, tools=getattr(trainer, "tools", None),
                              chat_template=getattr(trainer, "chat_template", None),
                              template_kwargs=getattr(trainer, "chat_template_kwargs", None))


__all__ = ["TokenMask", "mask_from_ids", "mask_from_messages", "mask_of_last_rollout", "prefix_preserving",
           "tool_calls_parse"]
