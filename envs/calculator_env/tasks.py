"""The task list of calculator_env: deterministic arithmetic questions, in a train and a test split.

A task spec (what every client may read, e.g. via `list_tasks`) holds the question but never the
answer; the environment computes the answer itself with `safe_eval` when it grades.
"""

from __future__ import annotations

import ast
import operator
import random
from functools import lru_cache

SPLIT_SIZES = {"train": 1000, "test": 200}
_SPLIT_SEEDS = {"train": 0, "test": 1_000_003}  # separate random streams per split
DIFFICULTIES = ("easy", "medium", "hard")


def _expression(rng: random.Random, difficulty: str) -> str:
    """easy: a chain of 2-3 two-digit additions/subtractions (doable in the head);
    medium: two-digit times one-digit, plus or minus a two-digit number;
    hard: two-digit times two-digit, minus a two-digit number (a calculator pays off)."""
    if difficulty == "easy":
        terms = [str(rng.randint(10, 99)) for _ in range(rng.choice((2, 3)))]
        expr = terms[0]
        for term in terms[1:]:
            expr += f" {rng.choice('+-')} {term}"
        return expr
    if difficulty == "medium":
        return f"{rng.randint(12, 99)} * {rng.randint(3, 9)} {rng.choice('+-')} {rng.randint(10, 99)}"
    return f"{rng.randint(12, 99)} * {rng.randint(12, 99)} - {rng.randint(10, 99)}"


@lru_cache(maxsize=None)
def _split_expressions(split: str) -> tuple[str, ...]:
    """Every expression of a split, generated once. Test questions never repeat a train question."""
    if split not in SPLIT_SIZES:
        raise KeyError(f"Unknown split {split!r}; calculator_env has {sorted(SPLIT_SIZES)}")
    avoid = set(_split_expressions("train")) if split == "test" else set()
    rng = random.Random(_SPLIT_SEEDS[split])
    out: list[str] = []
    while len(out) < SPLIT_SIZES[split]:
        expr = _expression(rng, DIFFICULTIES[len(out) % 3])
        answer = str(safe_eval(expr))
        # keep a question whose answer does not appear in it verbatim, and never reuse one
        if expr in avoid or answer in expr.split():
            continue
        avoid.add(expr)
        out.append(expr)
    return tuple(out)


def make_task(split: str, index: int) -> dict:
    """The task spec of task `index` in `split` (same result on every call and machine)."""
    expressions = _split_expressions(split)
    if not 0 <= index < len(expressions):
        raise IndexError(f"{split} has {len(expressions)} tasks; index {index} is out of range")
    return {
        "id": f"{split}-{index:04d}",
        "difficulty": DIFFICULTIES[index % 3],
        "expression": expressions[index],
    }


def true_answer(task_spec: dict) -> int:
    """The integer the `answer` tool expects for this task (computed, never stored in the spec)."""
    return int(safe_eval(task_spec["expression"]))


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_EXPRESSION_CHARS = 200


def safe_eval(expression: str) -> int | float:
    """Evaluate + - * / // % and parentheses on numbers, nothing else (no names, calls or powers).

    Raises ValueError with a message the model can read when the expression is not allowed.
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from exc

    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
                raise ValueError("division by zero")
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](walk(node.operand))
        raise ValueError(f"only numbers, + - * / // % and parentheses are allowed, not {ast.unparse(node)!r}")

    value = walk(tree)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value


def parse_integer(text: str) -> int | None:
    """Read a submitted answer: ' 873 ', '873.0' and '+873' are 873; anything else is None."""
    try:
        value = float(str(text).strip().replace(",", ""))
    except ValueError:
        return None
    return int(value) if value.is_integer() else None
