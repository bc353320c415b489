"""Hardening of this server's WebSocket (`/ws`) against frames and clients OpenEnv handles badly.

The same file is shipped inside every environment package of this repository
(``<package>/server/wire_guard.py``), so each package still deploys on its own (a Space gets one
package folder); tests/test_contract_echo.py keeps the copies identical. What it adds,
as ASGI middleware in front of OpenEnv's `create_app` (``app.add_middleware(WebSocketGuard)``):

- A frame that is not one JSON object (a binary frame, a JSON list/number/string/null, JSON nested
  too deeply to parse) gets an ``INVALID_JSON`` error frame that says what to send, and the session
  goes on. OpenEnv 0.10.0 would close the session with an internal message ('text', "'list' object
  has no attribute 'get'").
- A client that vanishes mid-request (a TCP reset) costs one WARNING line naming the client,
  instead of OpenEnv's ~80-line "Exception in ASGI application" traceback.

Nothing else changes: text frames holding a JSON object (and frames that are not JSON at all,
which OpenEnv already answers with INVALID_JSON) go to OpenEnv untouched.

The two other pieces every server here needs live here too, for the same reason: `max_concurrent_envs`
(the MAX_CONCURRENT_ENVS setting, checked) and `serve` (the ``python -m ...server.app`` entry point).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Awaitable, Callable, Dict

logger = logging.getLogger("uvicorn.error")

WHAT_TO_SEND = (
    'Send one JSON object per text frame, e.g. {"type": "reset", "data": {...}}, '
    '{"type": "step", "data": {<the action\'s fields>}}, {"type": "state"} or {"type": "close"}.'
)

Message = Dict[str, Any]


def _frame_problem(message: Message) -> str | None:
    """Why a received frame is not a message OpenEnv can take, or None when it is."""
    text = message.get("text")
    if text is None:
        return "a binary frame"
    try:
        value = json.loads(text)
    except RecursionError:
        return "JSON nested too deeply to read"
    except ValueError:
        return None  # not JSON at all: OpenEnv answers INVALID_JSON and keeps the session
    if isinstance(value, dict):
        return None
    kind = "null" if value is None else {list: "an array", str: "a string"}.get(type(value), "a number")
    return f"JSON {kind}, not an object"


class WebSocketGuard:
    """ASGI middleware: answer non-object frames with a clear error; one log line per dropped client."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Message, receive, send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        gone = False

        async def guarded_receive() -> Message:
            nonlocal gone
            while True:
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    gone = True
                if message["type"] != "websocket.receive":
                    return message
                problem = _frame_problem(message)
                if problem is None:
                    return message
                error = {"type": "error", "data": {"message": f"Got {problem}. {WHAT_TO_SEND}",
                                                   "code": "INVALID_JSON"}}
                await guarded_send({"type": "websocket.send", "text": json.dumps(error)})

        async def guarded_send(message: Message) -> None:
            nonlocal gone
            try:
                await send(message)
            except Exception:
                gone = True
                raise

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except Exception as exc:
            if not gone:
                raise
            client = scope.get("client") or ("?", "?")
            logger.warning("WebSocket client %s:%s dropped the connection mid-request (%s: %s); "
                           "its session is closed.", client[0], client[1], type(exc).__name__, exc)


__all__ = ["WHAT_TO_SEND", "WebSocketGuard"]


def max_concurrent_envs(default: int) -> int:
    """``MAX_CONCURRENT_ENVS`` from the environment as a positive int (`default` when unset), or a clear error.

    It caps the server's open sessions; GRPO opens one per concurrent rollout."""
    import os

    raw = os.environ.get("MAX_CONCURRENT_ENVS", "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"MAX_CONCURRENT_ENVS must be a positive integer, got {raw!r}.")
    return value


def serve(app, description: str, default_port: int = 8000) -> None:
    """``python -m <package>.server.app [--host H] [--port P]``: run `app` with uvicorn."""
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=default_port)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port)
