"""The echo environment: the smallest OpenEnv environment, for learning the API.

Wire-compatible with the upstream OpenEnv `echo_env` the seed tutorial installs from a Space, so
`from echo_env import EchoAction, EchoEnv` works unchanged against a local server:

    python -m uvicorn echo_env.server.app:app --port 8000     # the server
    EchoEnv(base_url="http://127.0.0.1:8000")                 # typed client (reset/step/state)
    EchoMCPEnv(base_url="http://127.0.0.1:8000")              # the same server seen as MCP tools

A step sends `EchoAction(message=...)`; the observation carries `echoed_message` (the message,
unchanged) and `message_length`; the reward is `0.1 * len(message)` (as upstream). Episodes never
end by themselves. The same server also exposes two MCP tools, `echo_message(message)` and
`echo_with_length(message)`, on `/mcp` (JSON-RPC over HTTP or WebSocket).
"""

from .client import EchoEnv, EchoMCPEnv
from .models import EchoAction, EchoObservation

__all__ = ["EchoAction", "EchoEnv", "EchoMCPEnv", "EchoObservation"]
