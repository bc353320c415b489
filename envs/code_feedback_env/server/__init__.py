"""Server side of code_feedback_env (the ASGI app lives in `code_feedback_env.server.app`)."""

from .environment import CodeFeedbackEnvironment

__all__ = ["CodeFeedbackEnvironment"]
