"""ASGI app of the TextArena environment (Wordle-v0 unless TEXTARENA_ENV_ID says otherwise).

    MAX_CONCURRENT_ENVS=16 python -m uvicorn textarena_env.server.app:app --port 8001

Each WebSocket session (`/ws`, what `TextArenaEnv` uses) gets its own game. MAX_CONCURRENT_ENVS
(default 64) caps the open sessions; one more is refused with a CAPACITY_REACHED error frame.
A rollout keeps one session per episode it plays at once, so size the cap to that. HTTP /reset
and /step are stateless (a fresh game per call): use the WebSocket for episodes.
"""

from __future__ import annotations

import logging

from fastapi import Request
from fastapi.responses import JSONResponse
from openenv.core.env_server.http_server import create_app

from ..models import TextArenaAction, TextArenaObservation, TextArenaState
from .environment import GameSetupError, TextArenaEnvironment, env_id_from_env, template_game
from .wire_guard import WebSocketGuard, max_concurrent_envs, serve

DEFAULT_MAX_CONCURRENT_ENVS = 64


def max_concurrent_envs_from_env() -> int:
    """``MAX_CONCURRENT_ENVS`` as a positive int (default 64), or a clear error."""
    return max_concurrent_envs(DEFAULT_MAX_CONCURRENT_ENVS)


class _QuietWebSocketLifecycle(logging.Filter):
    """Drop uvicorn's per-connection 'connection open/closed' INFO lines (thousands per run)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.INFO or record.getMessage() not in ("connection open", "connection closed")


logging.getLogger("uvicorn.error").addFilter(_QuietWebSocketLifecycle())

template_game(env_id_from_env())  # build the word lists now, not in the first session

app = create_app(
    TextArenaEnvironment,
    TextArenaAction,
    TextArenaObservation,
    env_name="textarena",
    max_concurrent_envs=max_concurrent_envs_from_env(),
    state_cls=TextArenaState,
)
app.add_middleware(WebSocketGuard)  # clear errors for non-object frames; one log line per dropped client


@app.exception_handler(GameSetupError)
async def _bad_reset_request(request: Request, exc: GameSetupError) -> JSONResponse:
    """HTTP ``/reset`` with a bad argument or word: a 400 with the message, not a 500."""
    return JSONResponse(status_code=400, content={"detail": str(exc)})


def main() -> None:
    """``python -m textarena_env.server.app [--host H] [--port P]``."""
    serve(app, __doc__.splitlines()[0], default_port=8001)


if __name__ == "__main__":
    main()
