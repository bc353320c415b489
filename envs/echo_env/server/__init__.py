"""Server side of echo_env (the ASGI app lives in `echo_env.server.app`)."""

from .environment import EchoEnvironment

__all__ = ["EchoEnvironment"]
