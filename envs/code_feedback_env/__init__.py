"""Code feedback: an OpenEnv environment that runs submitted Python and reports what happened.

The seed tutorial's custom environment, built the same way (typed Pydantic action and
observation, an `Environment` subclass, OpenEnv's `create_app`, a typed client), with one change
that matters: the code never runs inside the server. Each submission runs in its own throw-away
process with time, CPU, memory, process, output, file-system and network limits
(`server/sandbox.py`), so an infinite loop or a fork bomb becomes an observation, not an outage.

    python -m uvicorn code_feedback_env.server.app:app --port 8000
    async with CodeFeedbackEnv(base_url="http://127.0.0.1:8000") as env:
        await env.reset()                                   # free mode: any code
        await env.step(CodeAction(code="def add(a, b): return a + b", function_name="add"))
        await env.reset(task="add")                         # task mode: graded by tests

Rewards (as the seed, plus graded tasks): a failed run (error, timeout, limit) -0.5; a clean run
that defines `function_name` 1.0 in free mode; in task mode the fraction of tests passed, 0..1.
"""

from .client import CodeFeedbackEnv
from .models import CodeAction, CodeObservation
from .tasks import TASKS

__all__ = ["CodeAction", "CodeFeedbackEnv", "CodeObservation", "TASKS"]
