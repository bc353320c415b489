"""The code feedback environment: run a submission in the sandbox, report status and reward.

- `reset()` starts free mode (any code; reward 1.0 when it runs cleanly and defines
  `function_name`); `reset(task="add")` starts task mode (the task's tests grade the function;
  reward = fraction passed; the episode is done when all pass). Unknown tasks are a clear error.
- `step(CodeAction(code=..., function_name=...))` runs the code with `server/sandbox.py`'s `run_python`
  in a separate process. Anything that goes wrong in there (exceptions, timeouts, memory, output,
  forbidden files or sockets) comes back as an observation with `status` and `error`, reward -0.5.
  The server process never executes the code, so it keeps serving.
"""

from __future__ import annotations

import os
import uuid
from typing import Any, Optional

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import State

from .sandbox import Limits, run_python

from ..models import CodeAction, CodeObservation
from ..tasks import TASKS

READY_MESSAGE = "Environment ready. Submit Python code for feedback."
FAILURE_REWARD = -0.5

_LIMIT_VARIABLES = {
    "CODE_ENV_WALL_TIMEOUT_S": ("wall_timeout_s", float),
    "CODE_ENV_CPU_TIME_S": ("cpu_time_s", int),
    "CODE_ENV_MEMORY_MB": ("memory_mb", int),
    "CODE_ENV_MAX_PROCESSES": ("max_processes", int),
    "CODE_ENV_MAX_OUTPUT_CHARS": ("max_output_chars", int),
}


def limits_from_env() -> Limits:
    """Sandbox limits, with any `CODE_ENV_*` variable of the server's environment on top."""
    limits = Limits()
    for variable, (field_name, cast) in _LIMIT_VARIABLES.items():
        raw = os.environ.get(variable, "").strip()
        if raw:
            try:
                value = cast(raw)
            except ValueError:
                value = 0
            if value <= 0:
                raise ValueError(f"{variable} must be a positive number, got {raw!r}.")
            setattr(limits, field_name, value)
    return limits


class CodeFeedbackEnvironment(Environment[CodeAction, CodeObservation, State]):
    """Runs submissions in a sandbox. Each WebSocket session gets its own instance."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._limits = limits_from_env()
        self._task = None
        self._state = State(episode_id=str(uuid.uuid4()), step_count=0)

    def reset(
        self,
        seed: Optional[int] = None,
        episode_id: Optional[str] = None,
        task: Optional[str] = None,
        **kwargs: Any,
    ) -> CodeObservation:
        if task is not None and task not in TASKS:
            raise ValueError(f"Unknown task {task!r}. Known tasks: {', '.join(TASKS)} "
                             "(or no task for free mode).")
        self._task = TASKS[task] if task is not None else None
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        if self._task is None:
            return CodeObservation(status="ok", output=READY_MESSAGE, reward=0.0)
        return CodeObservation(
            status="ok", output=f"{READY_MESSAGE}\nTask: {self._task.prompt}", task=self._task.prompt,
            function_name=self._task.function_name, tests_total=len(self._task.tests), reward=0.0,
        )

    def step(self, action: CodeAction, timeout_s: Optional[float] = None,
             **kwargs: Any) -> CodeObservation:
        self._state.step_count += 1
        task = self._task
        function_name = task.function_name if task else action.function_name.strip()
        if task and action.function_name and action.function_name != task.function_name:
            return self._failed(
                status="error",
                error=f"This task asks for a function named {task.function_name!r}, "
                      f"not {action.function_name!r}.",
            )
        call = None
        if function_name:
            calls = [list(args) for args, _ in task.tests] if task else []
            call = {"function": function_name, "calls": calls}
        result = run_python(action.code, self._limits, call=call)
        common = dict(execution_time_ms=result.elapsed_ms, sandbox=result.isolation,
                      task=task.prompt if task else None, function_name=function_name or None)
        if result.status != "ok":
            return self._failed(status=result.status, output=result.stdout or None,
                                error=result.stderr or None, limit=result.limit, **common)
        if task is None:
            feedback = (f"Function '{function_name}' defined successfully." if function_name
                        else "Code ran successfully.")
            output = feedback + (f"\nstdout:\n{result.stdout}" if result.stdout else "")
            return CodeObservation(status="ok", output=output, error=result.stderr or None,
                                   reward=1.0, done=False, **common)
        return self._graded(task, result, common)

    def _graded(self, task, result, common: dict) -> CodeObservation:
        answers = result.results[-len(task.tests):] if task.tests else []
        passed, lines = 0, []
        for i, (args, expected) in enumerate(task.tests):
            answer = answers[i] if i < len(answers) else {"ok": False, "error": "no result"}
            call = f"{task.function_name}({', '.join(repr(a) for a in args)})"
            if answer.get("ok") and answer.get("value") == expected:
                passed += 1
                lines.append(f"PASS {call} == {expected!r}")
            elif answer.get("ok"):
                lines.append(f"FAIL {call} returned {answer.get('value')!r}, expected {expected!r}")
            else:
                lines.append(f"FAIL {call} raised {answer.get('error')}")
        total = len(task.tests)
        output = f"{passed}/{total} tests passed\n" + "\n".join(lines)
        if result.stdout:
            output += f"\nstdout:\n{result.stdout}"
        return CodeObservation(status="ok", output=output, error=result.stderr or None,
                               tests_passed=passed, tests_total=total,
                               reward=round(passed / total, 6), done=passed == total, **common)

    def _failed(self, **fields: Any) -> CodeObservation:
        return CodeObservation(reward=FAILURE_REWARD, done=False, **fields)

    @property
    def state(self) -> State:
        return self._state


__all__ = ["CodeFeedbackEnvironment", "FAILURE_REWARD", "READY_MESSAGE", "limits_from_env"]
