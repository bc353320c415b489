"""Tool calls in a reply's text, read the way TRL reads the Qwen3 format: `<tool_call>{"name": ..., "arguments":
{...}}</tool_call>`."""

from __future__ import annotations

import json
import re

_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


def parse_tool_calls(text: str) -> list[dict]:
    """Every well-formed `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` in `text`, as
    {"name", "arguments"} dicts, the way TRL reads the Qwen3 format. The one parser of this project:
    the reasoning_gym evaluation, the ORS evaluation and notebook 02's data checks all use it."""
    calls = []
    for match in _TOOL_CALL.finditer(text):
        try:
            call = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            continue
        args = call.get("arguments", {})
        if isinstance(args, str):  # some models emit the arguments as a JSON string
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                continue
        if isinstance(args, dict):
            calls.append({"name": call["name"], "arguments": args})
    return calls


def strip_tool_calls(text: str) -> str:
    """`text` without its `<tool_call>` blocks: what the model wrote around its calls."""
    return _TOOL_CALL.sub("", text)
