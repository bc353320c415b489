"""ASGI app of the reasoning_gym environment.

    MAX_CONCURRENT_ENVS=64 python -m uvicorn reasoning_gym_env.server.app:app --port 8000

Each WebSocket session (`/ws`, what `ReasoningGymEnv` uses) gets its own
`ReasoningGymEnvironment`. ``MAX_CONCURRENT_ENVS`` (default 64) caps the number of open sessions:
one more is refused at once with an error frame (code ``CAPACITY_REACHED``), which the client
raises as ``RuntimeError("Server error: Server at capacity: 64/64 sessions active. ...")``.
GRPO opens one session per concurrent rollout, so size the cap to that. HTTP ``/reset`` and
``/step`` are stateless (a fresh environment per call): use the WebSocket for episodes.
"""

from __future__ import annotations

import logging
from fastapi import Request
from fastapi.responses import JSONResponse
from openenv.core.env_server.http_server import create_app

from ..models import ReasoningGymAction, ReasoningGymObservation, ReasoningGymState
from .environment import DatasetError, ReasoningGymEnvironment
from .wire_guard import WebSocketGuard, max_concurrent_envs, serve

DEFAULT_MAX_CONCURRENT_ENVS = 64


def max_concurrent_envs_from_env() -> int:
    """``MAX_CONCURRENT_ENVS`` as a positive int (default 64), or a clear error."""
    return max_concurrent_envs(DEFAULT_MAX_CONCURRENT_ENVS)


class _QuietWebSocketLifecycle(logging.Filter):
    """Drop uvicorn's per-connection 'connection open' / 'connection closed' INFO lines.

    A training run opens thousands of sessions; errors and warnings still get through.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        return record.getMessage() not in ("connection open", "connection closed")


logging.getLogger("uvicorn.error").addFilter(_QuietWebSocketLifecycle())

app = create_app(
    ReasoningGymEnvironment,
    ReasoningGymAction,
    ReasoningGymObservation,
    env_name="reasoning_gym",
    max_concurrent_envs=max_concurrent_envs_from_env(),
    state_cls=ReasoningGymState,
)
app.add_middleware(WebSocketGuard)  # clear errors for non-object frames; one log line per dropped client


@app.exception_handler(DatasetError)
async def _bad_dataset_request(request: Request, exc: DatasetError) -> JSONResponse:
    """HTTP ``/reset`` with a bad dataset: a 400 with the message, not a 500 and a traceback."""
    return JSONResponse(status_code=400, content={"detail": str(exc)})


def main() -> None:
    """``python -m reasoning_gym_env.server.app [--host H] [--port P]``."""
    serve(app, __doc__.splitlines()[0], default_port=8000)


if __name__ == "__main__":
    main()
