"""The ORS environment class: tasks, splits, a prompt, two tools, and the reward.

One instance serves one session (one episode). `calculate` is a helper tool (reward None);
`answer` ends the episode with the environment's own grade.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from openreward.environments import Environment, Split, TextBlock, ToolOutput, tool

from calculator_env.tasks import SPLIT_SIZES, make_task, parse_integer, safe_eval, true_answer

MAX_CALCULATIONS = 5  # per episode: enough for any task, small enough to stop a looping policy

# Instructions first, the question last, in reasoning_gym's phrasing (what notebook 02's SFT model saw).
PROMPT = (
    "You may use the `calculate` tool to evaluate an arithmetic expression. "
    "When you know the result, call the `answer` tool exactly once with the final integer.\n"
    "State the final answer to the following arithmetic problem: {expression} ="
)


class CalculateInput(BaseModel):
    expression: str = Field(description="An arithmetic expression: numbers, + - * / and parentheses.")


class AnswerInput(BaseModel):
    answer: str = Field(description="The final integer result as a plain number (a leading minus sign is fine).")


class CalculatorEnv(Environment):
    """Integer arithmetic with a calculator tool; the environment grades the submitted answer."""

    def __init__(self, task_spec: dict = {}, secrets: dict[str, str] = {}) -> None:  # noqa: B006 (ORS signature)
        super().__init__(task_spec, secrets)
        self.calculations = 0

    @classmethod
    def list_splits(cls) -> list[Split]:
        return [Split(name="train", type="train"), Split(name="test", type="test")]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [make_task(split, i) for i in range(SPLIT_SIZES[split])]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=PROMPT.format(expression=self.task_spec["expression"]))]

    @tool(concurrent=True)
    def calculate(self, params: CalculateInput) -> ToolOutput:
        """Evaluate an arithmetic expression and return its value."""
        if self.calculations >= MAX_CALCULATIONS:
            return ToolOutput(blocks=[TextBlock(text=f"Error: at most {MAX_CALCULATIONS} calculations per task. "
                                                     "Call `answer` now.")])
        self.calculations += 1
        try:
            value = safe_eval(params.expression)
        except ValueError as exc:
            return ToolOutput(blocks=[TextBlock(text=f"Error: {exc}")], metadata={"calculations": self.calculations})
        return ToolOutput(blocks=[TextBlock(text=str(value))], metadata={"calculations": self.calculations})

    @tool
    def answer(self, params: AnswerInput) -> ToolOutput:
        """Submit the final integer answer. Ends the task."""
        submitted = parse_integer(params.answer)
        correct = submitted is not None and submitted == true_answer(self.task_spec)
        text = "Correct." if correct else ("Incorrect." if submitted is not None else
                                           f"Incorrect: {params.answer!r} is not an integer.")
        return ToolOutput(
            blocks=[TextBlock(text=text)],
            reward=1.0 if correct else 0.0,
            finished=True,
            metadata={"correct": correct, "calculations": self.calculations},
        )
