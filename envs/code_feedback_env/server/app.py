"""ASGI app of the code feedback environment.

    MAX_CONCURRENT_ENVS=16 python -m uvicorn code_feedback_env.server.app:app --port 8000

Each WebSocket session (`/ws`, what `CodeFeedbackEnv` uses) gets its own environment; each step
runs the submission in its own sandboxed process (`server/sandbox.py`), so a session that submits a
fork bomb costs that session a few seconds, and the others a share of the CPU for those seconds. ``MAX_CONCURRENT_ENVS``
(default 16) caps open sessions, and with them the sandboxes running at once. Sandbox limits can
be tightened with ``CODE_ENV_WALL_TIMEOUT_S``, ``CODE_ENV_CPU_TIME_S``, ``CODE_ENV_MEMORY_MB``,
``CODE_ENV_MAX_PROCESSES`` and ``CODE_ENV_MAX_OUTPUT_CHARS``.
"""

from __future__ import annotations

from openenv.core.env_server.http_server import create_app

from ..models import CodeAction, CodeObservation
from .environment import CodeFeedbackEnvironment, limits_from_env
from .wire_guard import WebSocketGuard, max_concurrent_envs, serve

DEFAULT_MAX_CONCURRENT_ENVS = 16


def max_concurrent_envs_from_env() -> int:
    """``MAX_CONCURRENT_ENVS`` as a positive int (default 16), or a clear error."""
    return max_concurrent_envs(DEFAULT_MAX_CONCURRENT_ENVS)


limits_from_env()  # a bad CODE_ENV_* variable fails at start-up, not on the first step
app = create_app(
    CodeFeedbackEnvironment,
    CodeAction,
    CodeObservation,
    env_name="code_feedback_env",
    max_concurrent_envs=max_concurrent_envs_from_env(),
)
app.add_middleware(WebSocketGuard)  # clear errors for non-object frames; one log line per dropped client


def main() -> None:
    """``python -m code_feedback_env.server.app [--host H] [--port P]``."""
    serve(app, __doc__.splitlines()[0], default_port=8000)


if __name__ == "__main__":
    main()
