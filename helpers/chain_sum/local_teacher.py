"""A local, OpenAI-compatible teacher for arithmetic: a stand-in for a strong LLM behind an API.

Notebook 02 collects SFT data with `openenv collect`, which asks a teacher model for a tool call
over the OpenAI chat-completions protocol. Offline there is no gpt-5-mini to ask, so this module
serves a tiny FastAPI app that speaks the same protocol and "solves" chain_sum questions exactly
(it parses `12 + 34 - 5` with a regex and adds, never `eval`). To make it behave like a real
teacher it makes seeded mistakes: with probability `mistake_rate` it answers a slightly wrong
number, and with probability `no_tool_rate` it replies in prose without calling the tool. Which
questions get a mistake depends only on (seed, question), so a run is reproducible.

With `show_work` it writes its working before the call, column by column as on paper
("47 + 38: ones 7 + 8 = 15, carry 1; tens 4 + 3 + 1 = 8. 47 + 38 = 85."), the way a strong LLM
teacher explains itself. A 135M student imitating that learns to add far better than one that
must produce the sum in one go (notebook 02 measures both).

    from helpers.servers import LocalServer
    with LocalServer("helpers.chain_sum.local_teacher:create_app", factory=True, name="teacher",
                     env={"TEACHER_MISTAKE_RATE": "0.1", "TEACHER_SEED": "0"}) as teacher:
        # openenv collect ... --llm-endpoint {teacher.base_url} --model chain-sum-teacher

**Calculator mode** (notebook 04): when the request offers a `calculate` tool, the teacher looks the
expression up with it in a seeded share `calculate_share` of the questions (then answers with the tool's
result, a few turns later), and answers from its own arithmetic otherwise, with its `mistake_rate`. It
understands `+ - *` with the usual precedence (`39 * 76 - 27`), still without `eval`.

Settings (environment variables, read when the app is created):
    TEACHER_MISTAKE_RATE  share of answers that are wrong (default 0.1)
    TEACHER_NO_TOOL_RATE  share of replies without a tool call (default 0.0)
    TEACHER_SEED          seed of the mistakes (default 0)
    TEACHER_SHOW_WORK     "1": write the column-by-column working before the tool call (default "0")
    TEACHER_CALCULATE_SHARE  share of questions looked up with a `calculate` tool, when one is offered (default 0.0)
    TEACHER_MODEL         the model name it reports (default "chain-sum-teacher")

Swap in a real teacher by pointing `openenv collect` at any OpenAI-compatible endpoint instead
(`--provider openai --model gpt-5-mini`, or `--llm-endpoint URL` for vLLM / `transformers serve`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, HTTPException, Request

DEFAULT_MODEL_NAME = "chain-sum-teacher"

# "State the final answer to the following arithmetic problem: 12 + 34 - -5 =": numbers may carry a sign.
_EXPRESSION = re.compile(r"\s*(-?\d+(?:\s*[+-]\s*-?\d+)*)\s*=?\s*")
_TOKEN = re.compile(r"\s*([+-])\s*(-?\d+)")


def _parse_terms(question: str) -> tuple[int, list[tuple[str, int]]] | None:
    """The first number and the (sign, number) steps of the expression after a chain_sum question's last colon.

    "... 12 + 34 - -5 =" -> (12, [("+", 34), ("-", -5)]); None when it is not such an expression.
    """
    match = _EXPRESSION.fullmatch(question.rsplit(":", 1)[-1])
    if not match:
        return None
    expression = match.group(1)
    first = re.match(r"-?\d+", expression)
    return int(first.group(0)), [(sign, int(number)) for sign, number in _TOKEN.findall(expression[first.end():])]


def _apply(total: int, sign: str, number: int) -> int:
    return total + number if sign == "+" else total - number


def solve_chain_sum(question: str) -> int | None:
    """The exact value of the `a + b - c =` expression at the end of a chain_sum question, else None.

    Only integers and `+`/`-` are understood; anything else returns None (no `eval`).
    """
    parsed = _parse_terms(question)
    if parsed is None:
        return None
    total, steps = parsed
    for sign, number in steps:
        total = _apply(total, sign, number)
    return total


_PRODUCT_EXPRESSION = re.compile(r"\s*(-?\d+(?:\s*[-+*]\s*-?\d+)*)\s*=?\s*")
_OPERATOR = re.compile(r"\s*([-+*])\s*(-?\d+)")


def solve_expression(question: str) -> int | None:
    """The exact value of an integer `+ - *` expression at the end of a question (after its last colon),
    with `*` binding tighter: "... 39 * 76 - 27 =" -> 2937. None when it is not such an expression."""
    text = question_expression(question)
    if text is None:
        return None
    first = re.match(r"-?\d+", text)
    total, term = 0, int(first.group(0))
    for op, number in _OPERATOR.findall(text[first.end():]):
        if op == "*":
            term *= int(number)
        else:
            total, term = total + term, (int(number) if op == "+" else -int(number))
    return total + term


def question_expression(question: str) -> str | None:
    """The `+ - *` expression of a question, as written (what the teacher types into `calculate`)."""
    match = _PRODUCT_EXPRESSION.fullmatch(question.rsplit(":", 1)[-1])
    return match.group(1).strip() if match else None


_COLUMN_NAMES = ["ones", "tens", "hundreds", "thousands"]


def _column(i: int) -> str:
    return _COLUMN_NAMES[i] if i < len(_COLUMN_NAMES) else f"10^{i}"


def _add_columns(x: int, y: int) -> str:
    """x + y (both >= 0) digit by digit from the right: "ones 7 + 8 = 15, carry 1; tens 4 + 3 + 1 = 8"."""
    a, b = str(x)[::-1], str(y)[::-1]
    width, carry, steps = max(len(a), len(b)), 0, []
    for i in range(width):
        top, bottom = int(a[i]) if i < len(a) else 0, int(b[i]) if i < len(b) else 0
        total = top + bottom + carry
        text = f"{_column(i)} {top} + {bottom}" + (" + 1" if carry else "") + f" = {total}"
        carry = total // 10 if i < width - 1 else 0
        steps.append(text + (", carry 1" if carry else ""))
    return "; ".join(steps)


def _subtract_columns(x: int, y: int) -> str:
    """x - y (x >= y >= 0) digit by digit from the right: "ones 12 - 8 = 4, borrow 1; tens 7 - 1 - 3 = 3"."""
    a, b = str(x)[::-1], str(y)[::-1]
    borrow, steps = 0, []
    for i in range(len(a)):
        top, bottom = int(a[i]), int(b[i]) if i < len(b) else 0
        rest = (" - 1" if borrow else "") + f" - {bottom}"
        value = top - borrow - bottom
        borrow = int(value < 0)
        steps.append(f"{_column(i)} 1{top}{rest} = {value + 10}, borrow 1" if borrow
                     else f"{_column(i)} {top}{rest} = {value}")
    return "; ".join(steps)


def _one_operation(left: int, sign: str, number: int) -> str:
    """The working of `left sign number` (either may be negative), reduced to a sum or difference of magnitudes."""
    step = number if sign == "+" else -number
    result = _apply(left, sign, number)
    head = f"{left} {sign} {number}"
    if left >= 0 and step >= 0:
        big, small, op, negate = left, step, "+", False
    elif left < 0 and step < 0:
        big, small, op, negate = -left, -step, "+", True
    else:  # opposite signs: the larger magnitude minus the smaller, with the larger one's sign
        big, small = max(abs(left), abs(step)), min(abs(left), abs(step))
        op, negate = "-", (left if abs(left) >= abs(step) else step) < 0
    core = f"{big} {op} {small}"
    columns = _add_columns(big, small) if op == "+" else _subtract_columns(big, small)
    if core == head:
        return f"{core}: {columns}. {head} = {result}."
    return f"{head} = {'-(' + core + ')' if negate else core}. {core}: {columns}. {head} = {result}."


def worked_solution(question: str) -> str | None:
    """The column-by-column working of a chain_sum question, one line per operation, else None.

    "... 14 - 55 =" -> "14 - 55 = -(55 - 14). 55 - 14: ones 5 - 4 = 1; tens 5 - 1 = 4. 14 - 55 = -41."
    Every line ends with "= <running total>.", so the last line ends with the answer.
    """
    parsed = _parse_terms(question)
    if parsed is None:
        return None
    total, lines = parsed[0], []
    for sign, number in parsed[1]:
        lines.append(_one_operation(total, sign, number))
        total = _apply(total, sign, number)
    return "\n".join(lines) if lines else f"{total}"


def working_kind(question: str) -> str:
    """What column work a chain_sum question needs, read from the teacher's working: "addition, no carry",
    "addition, carry", "subtraction, borrow, negative result", ...; "not a chain sum" for anything else.

    Notebook 01 groups its held-out change by this: GRPO sharpens the kinds the model nearly gets right and can
    lose ground on the ones it rarely does, which one accuracy number hides."""
    working = worked_solution(question)
    if working is None or ":" not in working:   # not a sum, or a bare number ("7 =") with no column work
        return "not a chain sum"
    cores = [line.split(":", 1)[0].rsplit(". ", 1)[-1] for line in working.splitlines()]
    operations = sorted({"addition" if " + " in core else "subtraction" for core in cores})
    parts = [" and ".join(operations)]
    if "addition" in operations:
        parts.append("carry" if "carry 1" in working else "no carry")
    if "subtraction" in operations:
        parts.append("borrow" if "borrow 1" in working else "no borrow")
    if solve_chain_sum(question) < 0:
        parts.append("negative result")
    return ", ".join(parts)


def _unit_draw(seed: int, question: str, purpose: str) -> float:
    """A number in [0, 1) that depends only on (seed, question, purpose): reproducible "randomness"."""
    digest = hashlib.sha256(f"{seed}|{purpose}|{question}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass
class TeacherPolicy:
    """What the teacher replies to one question: the exact sum, a seeded mistake, or prose."""

    mistake_rate: float = 0.1
    no_tool_rate: float = 0.0
    seed: int = 0
    show_work: bool = False
    calculate_share: float = 0.0

    def __post_init__(self):
        for name in ("mistake_rate", "no_tool_rate", "calculate_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")

    @classmethod
    def from_env(cls) -> "TeacherPolicy":
        return cls(mistake_rate=float(os.environ.get("TEACHER_MISTAKE_RATE", "0.1")),
                   no_tool_rate=float(os.environ.get("TEACHER_NO_TOOL_RATE", "0.0")),
                   seed=int(os.environ.get("TEACHER_SEED", "0")),
                   show_work=os.environ.get("TEACHER_SHOW_WORK", "0").strip().lower() in ("1", "true", "yes"),
                   calculate_share=float(os.environ.get("TEACHER_CALCULATE_SHARE", "0.0")))

    def decide(self, question: str, can_calculate: bool = False) -> dict:
        """{"kind": "answer" | "mistake" | "no_tool" | "calculate" | "unknown", "value": int | None}.

        "calculate" (only when `can_calculate`: the request offers a `calculate` tool) means: look the
        expression up first; "answer"/"mistake" answer from the teacher's own arithmetic."""
        value = solve_chain_sum(question)
        if value is None:
            value = solve_expression(question)
        if value is None:
            return {"kind": "unknown", "value": None}
        if can_calculate and _unit_draw(self.seed, question, "calculate") < self.calculate_share:
            return {"kind": "calculate", "value": value}
        if _unit_draw(self.seed, question, "no_tool") < self.no_tool_rate:
            return {"kind": "no_tool", "value": value}
        if _unit_draw(self.seed, question, "mistake") < self.mistake_rate:
            offset = 1 + int(_unit_draw(self.seed, question, "offset") * 10)  # off by 1..10
            sign = 1 if _unit_draw(self.seed, question, "sign") < 0.5 else -1
            return {"kind": "mistake", "value": value + sign * offset}
        return {"kind": "answer", "value": value}


def _message_text(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, list):  # OpenAI "content parts"
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def _tool_names(tools: list[dict] | None) -> set[str]:
    return {t.get("function", t).get("name") for t in tools or [] if isinstance(t, dict)}


def _tool_call(name: str, arguments: dict) -> dict:
    # OpenAI sends arguments as a JSON *string*; clients json.loads it.
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def _after_tool(messages: list[dict], tools: list[dict] | None) -> dict:
    """The reply once a tool has answered: after `calculate`, submit its result; after anything else, stop."""
    last_call = next((c for m in reversed(messages) if m.get("role") == "assistant"
                      for c in reversed(m.get("tool_calls") or [])), None)
    result = _message_text(messages[-1]).strip() if messages[-1].get("role") == "tool" else ""
    name = (last_call or {}).get("function", {}).get("name")
    answer = _answer_tool(tools)
    if name == "calculate" and re.fullmatch(r"-?\d+", result) and answer:
        return {"role": "assistant", "content": None, "tool_calls": [_tool_call(answer[0], {answer[1]: result})]}
    return {"role": "assistant", "content": "Done."}


def _answer_tool(tools: list[dict] | None) -> tuple[str, str] | None:
    """(tool name, argument name) to answer with: the `answer` tool if offered, else the first tool."""
    functions = [t.get("function", t) for t in tools or [] if isinstance(t, dict)]
    if not functions:
        return None
    chosen = next((f for f in functions if f.get("name") == "answer"), functions[0])
    parameters = chosen.get("parameters") or {}
    names = list(parameters.get("required") or []) or list((parameters.get("properties") or {}).keys())
    return chosen.get("name", "answer"), (names[0] if names else "answer")


def reply(policy: TeacherPolicy, request: dict) -> dict:
    """The assistant message (OpenAI format) answering a chat-completions request body."""
    messages = request.get("messages") or []
    if any(m.get("role") == "tool" for m in messages):  # a tool already ran
        return _after_tool(messages, request.get("tools"))
    question = next((_message_text(m) for m in reversed(messages) if m.get("role") == "user"), "")
    decision = policy.decide(question, can_calculate="calculate" in _tool_names(request.get("tools")))
    tool = _answer_tool(request.get("tools"))
    if decision["kind"] == "unknown":
        return {"role": "assistant", "content": "I can only solve integer arithmetic like `12 + 34 - 5 =` "
                                                "or `39 * 76 - 27 =`."}
    if decision["kind"] == "calculate":
        return {"role": "assistant", "content": None,
                "tool_calls": [_tool_call("calculate", {"expression": question_expression(question)})]}
    if decision["kind"] == "no_tool" or tool is None:
        return {"role": "assistant", "content": f"The answer is {decision['value']}."}
    name, argument = tool
    # with show_work the working comes first; a "mistake" is then a slip copying the result into the call
    work = worked_solution(question) if policy.show_work else None
    return {"role": "assistant", "content": work, "tool_calls": [_tool_call(name, {argument: str(decision["value"])})]}


def chat_completion(policy: TeacherPolicy, request: dict, model_name: str) -> dict:
    """A full chat.completion response object around `reply`."""
    return completion_response(reply(policy, request), request, model_name)


def completion_response(message: dict, request: dict, model_name: str) -> dict:
    """The chat.completion object an OpenAI-compatible server sends around one assistant `message`."""
    prompt_chars = sum(len(_message_text(m)) for m in request.get("messages") or [])
    completion_chars = len(json.dumps(message))
    usage = {"prompt_tokens": prompt_chars // 4, "completion_tokens": completion_chars // 4}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model") or model_name,
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            "logprobs": None,
        }],
        "usage": usage,
    }


def create_app(policy: TeacherPolicy | None = None, model_name: str | None = None):
    """The FastAPI app: POST /v1/chat/completions, GET /v1/models, GET /health."""
    policy = policy or TeacherPolicy.from_env()
    model_name = model_name or os.environ.get("TEACHER_MODEL", DEFAULT_MODEL_NAME)
    app = FastAPI(title="Local chain_sum teacher (OpenAI-compatible stand-in)")
    app.state.policy = policy
    counts: dict[str, int] = {"answer": 0, "mistake": 0, "no_tool": 0, "calculate": 0, "unknown": 0}

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "model": model_name, "mistake_rate": policy.mistake_rate,
                "no_tool_rate": policy.no_tool_rate, "seed": policy.seed, "show_work": policy.show_work,
                "calculate_share": policy.calculate_share, "replies": counts}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0,
                                            "owned_by": "local"}]}

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except json.JSONDecodeError as exc:
            raise HTTPException(400, f"The request body is not JSON: {exc}") from exc
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise HTTPException(400, "Expected a JSON object with a `messages` list.")
        if body.get("stream"):
            raise HTTPException(400, "This local teacher does not stream; send stream=false.")
        question = next((_message_text(m) for m in reversed(body["messages"])
                         if isinstance(m, dict) and m.get("role") == "user"), "")
        response = chat_completion(policy, body, model_name)
        if not any(isinstance(m, dict) and m.get("role") == "tool" for m in body["messages"]):
            counts[policy.decide(question, "calculate" in _tool_names(body.get("tools")))["kind"]] += 1
        return response

    return app
