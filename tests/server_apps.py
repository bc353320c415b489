"""Small ASGI apps for testing helpers.servers itself (the environment servers have their own tests)."""

import os

from fastapi import FastAPI

app = FastAPI()


@app.get("/health")
def health():
    return {"status": "ok", "pid": os.getpid(), "greeting": os.environ.get("GREETING", "")}


def make_app():
    """A factory, for LocalServer(..., factory=True)."""
    return app


def broken_app():
    raise RuntimeError("this app refuses to start (on purpose)")
