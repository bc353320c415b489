"""ASGI app of the echo environment.

    MAX_CONCURRENT_ENVS=64 python -m uvicorn echo_env.server.app:app --port 8000

Routes (from OpenEnv's `create_app`): `/ws` (WebSocket episodes: what `EchoEnv` uses), `/mcp`
(MCP JSON-RPC over HTTP POST or WebSocket: what `EchoMCPEnv` uses), `/reset` `/step` `/state`
(stateless HTTP, a fresh environment per call), `/health`, `/schema`. ``MAX_CONCURRENT_ENVS``
(default 64) caps open sessions; GRPO opens one per concurrent rollout.
"""

from __future__ import annotations

from openenv.core.env_server.http_server import create_app

from ..models import EchoAction, EchoObservation
from .environment import EchoEnvironment
from .wire_guard import WebSocketGuard, max_concurrent_envs, serve

DEFAULT_MAX_CONCURRENT_ENVS = 64


def max_concurrent_envs_from_env() -> int:
    """``MAX_CONCURRENT_ENVS`` as a positive int (default 64), or a clear error."""
    return max_concurrent_envs(DEFAULT_MAX_CONCURRENT_ENVS)


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
    serve(app, __doc__.splitlines()[0], default_port=8000)


if __name__ == "__main__":
    main()
