"""ASGI app of the echo environment.

    MAX_CONCURRENT_ENVS=64 python -m uvicorn echo_env.server.app:app --port 8000

Routes (from OpenEnv's `create_app`): `/ws` (WebSocket episodes: what `EchoEnv` uses), `/mcp`
(MCP JSON-RPC over HTTP POST or WebSocket: what `EchoMCPEnv` uses), `/reset` `/step` `/state`
(stateless HTTP, a fresh environment per call), `/health`, `/schema`. ``MAX_CONCURRENT_ENVS``
(default 64) caps open sessions; GRPO opens one per concurrent rollout.
"""

from __future__ import annotations

import os

from openenv.core.env_server.http_server import create_app

from ..models import EchoAction, EchoObservation
from .environment import EchoEnvironment
from .wire_guard import WebSocketGuard

DEFAULT_MAX_CONCURRENT_ENVS = 64


def max_concurrent_envs_from_env() -> int:
    """``MAX_CONCURRENT_ENVS`` as a positive int (default 64), or a clear error."""
    raw = os.environ.get("MAX_CONCURRENT_ENVS", "").strip()
    if not raw:
        return DEFAULT_MAX_CONCURRENT_ENVS
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"MAX_CONCURRENT_ENVS must be a positive integer, got {raw!r}.")
    return value


app = create_app(
    EchoEnvironment,
    EchoAction,
    EchoObservation,
    env_name="echo_env",
    max_concurrent_envs=max_concurrent_envs_from_env(),
)
app.add_middleware(WebSocketGuard)  # clear errors for non-object frames; one log line per dropped client


def main() -> None:
    """``python -m echo_env.server.app [--host H] [--port P]``."""
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
