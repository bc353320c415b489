"""Hardening of this server's wire (`/ws`, `/mcp` and the HTTP routes) against input OpenEnv handles badly.

The same file is shipped inside every environment package of this repository
(``<package>/server/wire_guard.py``), so each package still deploys on its own (a Space gets one
package folder); tests/test_contract_echo.py keeps the copies identical. What it adds,
as ASGI middleware in front of OpenEnv's `create_app` (``app.add_middleware(WebSocketGuard)``):

- A WebSocket frame that is not one JSON object (a binary frame, a JSON list/number/string/null,
  JSON nested too deeply to parse) gets an ``INVALID_JSON`` error frame that says what to send, and
  the session goes on. OpenEnv 0.10.0 would close the session with an internal message ('text',
  "'list' object has no attribute 'get'").
- A frame holding an integer of more than 4,300 digits (Python's limit for reading a JSON number)
  gets a ``VALIDATION_ERROR`` frame and the session goes on; OpenEnv closed it (``SESSION_ERROR``).
- Error replies are bounded: OpenEnv (and FastAPI's 422) quote the offending value back, so a
  16 MB action came back as a 16 MB error. Any error reply (a WebSocket ``{"type": "error"}`` frame,
  an HTTP status >= 400) longer than ``MAX_ERROR_REPLY_CHARS`` has each quoted value cut to a short
  prefix and its size (`shorten`).
- An HTTP request body over ``MAX_BODY_BYTES`` (the WebSocket frame limit uvicorn applies, 16 MiB)
  is refused with a 413 before the app reads it, so every route has the same limit.
- A client that vanishes mid-request (a TCP reset) costs one WARNING line naming the client,
  instead of OpenEnv's ~80-line "Exception in ASGI application" traceback.

Nothing else changes: frames holding a JSON object (and frames that are not JSON at all, which
OpenEnv already answers with INVALID_JSON) go to OpenEnv untouched, and so do replies that are not
errors.

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
MAX_BODY_BYTES = 16 * 1024 * 1024  # uvicorn's default WebSocket frame limit (ws_max_size); HTTP bodies too
MAX_ERROR_REPLY_CHARS = 8_000  # an error reply longer than this has its quoted values shortened
QUOTE_CHARS = 100  # how much of an offending value an error reply keeps
LONG_TEXT_CHARS = 2_000  # a message longer than this keeps its start and its end
MAX_ITEMS = 20  # items of a list (or keys of an object) an error reply keeps

Message = Dict[str, Any]


def quote(value: Any) -> str:
    """A bounded description of a value for an error message: the start of its repr and its size."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    size = f"{len(text):,} characters" if isinstance(value, str) else f"{len(text):,} characters of JSON"
    if len(text) <= QUOTE_CHARS:
        return repr(value) if isinstance(value, str) else text
    return f"{text[:QUOTE_CHARS]!r}... ({size})"


def shorten(value: Any, key: str = "") -> Any:
    """`value` (a decoded JSON error reply) with every quoted input cut to a short prefix and its size.

    ``input`` fields (what pydantic and FastAPI echo back) become `quote(...)`; other strings over
    LONG_TEXT_CHARS keep their start and end (the end of a message usually says what to do); lists
    and objects keep MAX_ITEMS entries and say how many were left out."""
    if key == "input" and not isinstance(value, (bool, int, float)) and value is not None:
        return quote(value)
    if isinstance(value, str):
        if len(value) <= LONG_TEXT_CHARS:
            return value
        return f"{value[:1_000]}... [{len(value) - 1_500:,} of {len(value):,} characters left out] ...{value[-500:]}"
    if isinstance(value, list):
        kept = [shorten(item) for item in value[:MAX_ITEMS]]
        return kept + ([f"... and {len(value) - MAX_ITEMS:,} more"] if len(value) > MAX_ITEMS else [])
    if isinstance(value, dict):
        kept = {k: shorten(v, k) for k, v in list(value.items())[:MAX_ITEMS]}
        if len(value) > MAX_ITEMS:
            kept["..."] = f"{len(value) - MAX_ITEMS:,} more keys left out"
        return kept
    return value


def bounded_error_text(text: str) -> str:
    """An error reply's JSON text, shortened when it is over MAX_ERROR_REPLY_CHARS (else unchanged)."""
    if len(text) <= MAX_ERROR_REPLY_CHARS:
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text[:MAX_ERROR_REPLY_CHARS] + f"... [{len(text):,} characters in all]"
    return json.dumps(shorten(value))


def _frame_problem(message: Message) -> tuple[str, str] | None:
    """(error code, what is wrong) for a received frame OpenEnv cannot take, or None when it can."""
    text = message.get("text")
    if text is None:
        return "INVALID_JSON", f"Got a binary frame. {WHAT_TO_SEND}"
    try:
        value = json.loads(text)
    except RecursionError:
        return "INVALID_JSON", f"Got JSON nested too deeply to read. {WHAT_TO_SEND}"
    except json.JSONDecodeError:
        return None  # not JSON at all: OpenEnv answers INVALID_JSON and keeps the session
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        return "VALIDATION_ERROR", (f"Cannot read this frame: {exc}. Send numbers that long as strings; "
                                    "the session goes on.")
    if isinstance(value, dict):
        return None
    kind = "null" if value is None else {list: "an array", str: "a string"}.get(type(value), "a number")
    return "INVALID_JSON", f"Got JSON {kind}, not an object. {WHAT_TO_SEND}"


def _is_error_frame(text: str) -> bool:
    return '"type":"error"' in text[:40].replace(" ", "")


class WebSocketGuard:
    """ASGI middleware: clear errors for bad frames, bounded error replies, one body limit, quiet drops."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Message, receive, send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _http(self, scope: Message, receive, send) -> None:
        declared = dict(scope.get("headers") or []).get(b"content-length", b"0")
        size = int(declared) if declared.isdigit() else 0
        if size > MAX_BODY_BYTES:
            await _reply_json(send, 413, {"detail": _too_big(f"{size:,} bytes")})
            return
        start: Message = {}
        body: list[bytes] = []
        received, over, forwarded = 0, False, False

        async def bounded_receive() -> Message:  # a body sent in chunks, with no content-length
            nonlocal received, over
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > MAX_BODY_BYTES:
                    over = True
                    return {"type": "http.disconnect"}
            return message

        async def bounded_send(message: Message) -> None:
            nonlocal start, forwarded
            if message["type"] == "http.response.start" and message.get("status", 200) >= 400:
                start = message  # hold the error until its whole body is here
                return
            if over:
                return  # the 413 below answers instead
            if start and message["type"] == "http.response.body":
                body.append(message.get("body", b""))
                if message.get("more_body"):
                    return
                text = bounded_error_text(b"".join(body).decode("utf-8", "replace")).encode()
                headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
                await send({**start, "headers": headers + [(b"content-length", str(len(text)).encode())]})
                await send({"type": "http.response.body", "body": text})
                return
            forwarded = True
            await send(message)

        try:
            await self.app(scope, bounded_receive, bounded_send)
        except Exception:
            if not over:
                raise
        if over and not forwarded:
            await _reply_json(send, 413, {"detail": _too_big(f"over {MAX_BODY_BYTES:,} bytes")})

    async def _websocket(self, scope: Message, receive, send) -> None:
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
                code, text = problem
                error = {"type": "error", "data": {"message": text, "code": code}}
                await guarded_send({"type": "websocket.send", "text": json.dumps(error)})

        async def guarded_send(message: Message) -> None:
            nonlocal gone
            text = message.get("text")
            if message["type"] == "websocket.send" and text and len(text) > MAX_ERROR_REPLY_CHARS \
                    and _is_error_frame(text):
                message = {**message, "text": bounded_error_text(text)}
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


def _too_big(size: str) -> str:
    return (f"The request body is {size}; this server takes at most {MAX_BODY_BYTES:,} bytes "
            "(16 MiB, the same limit as a WebSocket frame). Send less.")


async def _reply_json(send, status: int, content: Any) -> None:
    body = json.dumps(content).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


__all__ = ["MAX_BODY_BYTES", "MAX_ERROR_REPLY_CHARS", "WHAT_TO_SEND", "WebSocketGuard", "quote", "shorten"]


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
