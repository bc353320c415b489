"""Small ASGI apps for testing helpers.servers itself (the environment servers have their own tests)."""

import os
import sys

from fastapi import FastAPI

app = FastAPI()


@app.get("/health")
def health():
    return {"status": "ok", "pid": os.getpid(), "greeting": os.environ.get("GREETING", "")}


@app.get("/whoami")
def whoami():
    """What a test of how the process was started needs: its session, parent, folder and import path."""
    return {"pid": os.getpid(), "pgid": os.getpgid(0), "ppid": os.getppid(), "cwd": os.getcwd(),
            "path0": sys.path[0], "greeting": os.environ.get("GREETING", "")}


def make_app():
    """A factory, for LocalServer(..., factory=True)."""
    return app


def broken_app():
    raise RuntimeError("this app refuses to start (on purpose)")
