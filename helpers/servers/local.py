"""Start local servers (OpenEnv environments, ORS environments, the teacher) on 127.0.0.1.

Every notebook needs a server it can talk to. Offline, `LocalServer` starts one in a process of its own on a
free port (forked from a parent that imported the server libraries once: forkserver.py), writes its logs to a file
(an unread pipe fills up and freezes a server), waits for its health endpoint, and stops it when the `with` block
ends, when Python exits, or when the Jupyter kernel dies (the server watches the process that started it).
Online, pass the hosted URL to `server_or_url` instead and nothing is started.

    with LocalServer("reasoning_gym_env.server.app:app", env={"MAX_CONCURRENT_ENVS": "8"}) as srv:
        client = ReasoningGymEnv(base_url=srv.base_url)
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path

from helpers.servers.forkserver import launch, with_helpers_importable
from helpers.servers.resilient import _span

_RUNNING: weakref.WeakSet = weakref.WeakSet()


class ServerError(RuntimeError):
    """A server could not be started or reached; the message says what to do."""


def free_port() -> int:
    """Ask the OS for a port nobody is listening on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_reachable(base_url: str, health_path: str = "/health", timeout: float = 10.0, *,
                    wake_timeout_s: float = 180.0, out=print) -> None:
    """Raise a clear `ServerError` unless `base_url` answers its health endpoint.

    A hosted Space that is asleep answers 502/503/504 (or nothing) while it wakes, for a minute or more: that
    is waited for, announced in one line, for up to `wake_timeout_s` (helpers.servers.resilient does the same
    for the sessions opened later). Nothing listening at all is an error at once (a wrong URL)."""
    url = base_url.rstrip("/") + health_path
    start, pause, announced = time.monotonic(), 0.5, False
    while True:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                if resp.status < 500:
                    return
                raise ServerError(f"{url} answered HTTP {resp.status}.")
        except urllib.error.HTTPError as exc:
            if exc.code < 500:  # it is up; the path may simply not exist on this server
                return
            if exc.code not in (502, 503, 504):
                raise ServerError(f"The server at {base_url} answered HTTP {exc.code} on {health_path}.") from exc
            waking, error = str(exc.code), exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if not isinstance(reason, TimeoutError) or wake_timeout_s <= 0:  # refused, bad host: at once
                raise ServerError(
                    f"No server answers at {base_url} ({exc}). Check the URL (and that the Space or "
                    f"server is running), or leave the base URL empty to start a local server."
                ) from exc
            waking, error = "no answer", exc
        waited = time.monotonic() - start
        if waited >= wake_timeout_s:
            raise ServerError(
                f"environment at {base_url} still answers {waking} after {waited:.0f} s of retrying: the Space "
                f"may be failing to start or paused. Open it in a browser to see its state and logs, or leave "
                f"the base URL empty to start a local server.") from error
        if not announced:
            out(f"environment at {base_url} is starting ({waking}); retrying for up to {_span(wake_timeout_s)}")
            announced = True
        time.sleep(min(pause, max(0.05, wake_timeout_s - waited)))
        pause = min(pause * 2, 10.0)


class LocalServer:
    """An ASGI app served by uvicorn in a child process on 127.0.0.1.

    Args:
        app: "module:attribute" of an ASGI app (or, with factory=True, of a function returning one).
        env: extra environment variables for the server process (e.g. MAX_CONCURRENT_ENVS).
        port: a fixed port; default picks a free one. A port already in use is an error.
        health_path: polled until it answers; "/health" for OpenEnv apps.
        name: used in messages and in the log file name.
        startup_timeout: seconds to wait for the health endpoint.
        log_dir: where the log file goes. Default: a temporary folder, removed when the server stops, so
            repeated runs leave nothing behind; kept when the server fails to start, for the error to point at.
        factory: `app` names a zero-argument function that returns the app.
    """

    def __init__(
        self,
        app: str,
        *,
        env: dict[str, str] | None = None,
        port: int | None = None,
        health_path: str = "/health",
        name: str | None = None,
        startup_timeout: float = 60.0,
        log_dir: str | os.PathLike | None = None,
        factory: bool = False,
    ):
        self.app = app
        self.env = {k: str(v) for k, v in (env or {}).items()}
        self.requested_port = port
        self.health_path = health_path
        self.name = name or app.split(":")[0].split(".")[0]
        self.startup_timeout = startup_timeout
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="agent-rl-servers-"))
        self.log_dir_is_temporary = not log_dir
        self.factory = factory
        self.port: int | None = None
        self.process = None   # a subprocess.Popen, or a forkserver.ForkedServer (the same pid/poll/wait)
        self.log_path = self.log_dir / f"{self.name}.log"

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise ServerError(f"{self.name} server is not started.")
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log written)"

    def start(self) -> "LocalServer":
        if self.process is not None and self.process.poll() is None:
            return self
        # The port is bound here (a port in use is an error now) and the bound socket handed to the server: asking
        # the OS for a free port and letting the child bind it later lost the port to another process in CI.
        listener = self._bind()
        self.port = listener.getsockname()[1]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        argv = [self.app, "--port", str(self.port), "--parent-pid", str(os.getpid())]
        if self.factory:
            argv.append("--factory")
        child_env = with_helpers_importable({**os.environ, **self.env, "PYTHONUNBUFFERED": "1"})
        with listener:
            self.process = launch(argv, env=child_env, cwd=os.getcwd(), log_path=str(self.log_path),
                                  listener=listener)
        _RUNNING.add(self)
        self._wait_healthy()
        return self

    def _bind(self) -> socket.socket:
        """A socket bound to 127.0.0.1 on the requested port (or one the OS picks), for the server to listen on."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as uvicorn does: a restart right after a stop
        try:
            listener.bind(("127.0.0.1", self.requested_port or 0))
        except OSError as exc:
            listener.close()
            raise ServerError(
                f"Port {self.requested_port} on 127.0.0.1 is already in use ({exc.strerror}), so the {self.name} "
                f"server cannot start there. Stop whatever is listening (`lsof -i :{self.requested_port}`) "
                f"or pass port=None to pick a free port."
            ) from exc
        return listener

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        url = self.base_url + self.health_path
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                self.process = None
                self.log_dir_is_temporary = False   # keep the log the error points at
                raise ServerError(
                    f"The {self.name} server ({self.app}) exited with code {code} while starting.\n"
                    f"Last lines of {self.log_path}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status < 500:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.log_dir_is_temporary = False   # keep the log the error points at
        self.stop()
        raise ServerError(
            f"The {self.name} server did not answer {url} within {self.startup_timeout:.0f} s.\n"
            f"Last lines of {self.log_path}:\n{self.log_tail()}"
        )

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=timeout)
        if self.log_dir_is_temporary:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def __enter__(self) -> "LocalServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"running at {self.base_url}" if self.is_running() else "stopped"
        return f"<LocalServer {self.name} {state}, log {self.log_path}>"


def check_sessions(base_url: str, n: int, timeout: float = 10.0) -> None:
    """Open `n` WebSocket sessions on an OpenEnv server at once; raise if it refuses any.

    A training run opens one session per concurrent rollout; a server that caps sessions lower (upstream
    OpenEnv's reasoning_gym server: 1 up to 685de411, MAX_CONCURRENT_ENVS with default 8 since 522baf00)
    would stop training midway. Call this first: it fails in seconds with what to do instead.
    """
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    url = base_url.rstrip("/").replace("https://", "wss://").replace("http://", "ws://") + "/ws"
    refusal, opened = None, 0
    try:
        with contextlib.ExitStack() as stack:
            for opened in range(1, n + 1):
                ws = stack.enter_context(connect(url, open_timeout=timeout, close_timeout=1))
                with contextlib.suppress(ConnectionClosed):  # a refusal may close before we send
                    ws.send(json.dumps({"type": "state"}))
                try:
                    reply = json.loads(ws.recv(timeout=timeout))
                except ConnectionClosed as exc:
                    reply = {"type": "error", "data": {"code": "CLOSED", "message": str(exc)}}
                if reply.get("type") == "error":
                    refusal = reply.get("data") or {}
                    break
    except (OSError, TimeoutError) as exc:
        raise ServerError(f"Cannot open WebSocket sessions on {url}: {exc}") from exc
    if refusal is not None:
        raise ServerError(
            f"The server at {base_url} refused session {opened} of the {n} this run opens at once "
            f"({refusal.get('code')}: {refusal.get('message')}). Training would stop midway. Deploy your "
            f"own copy with more sessions (set the Space variable MAX_CONCURRENT_ENVS to {n}: our envs/ package "
            f"and upstream OpenEnv's since 522baf00 read it, upstream's default is 8; an older upstream "
            f"reasoning_gym_env hard-codes max_concurrent_envs=1 in server/app.py: raise it to {n}), "
            f"or lower the number of concurrent rollouts.")


def server_or_url(base_url: str | None, app: str, **server_kwargs) -> tuple[str, LocalServer | None]:
    """Use the server at `base_url` if given (checked now), else start `app` locally.

    Returns (base_url, server); server is None when nothing was started. Stop it with
    `server.stop()` when done (or rely on exit-time cleanup).
    """
    if base_url:
        check_reachable(base_url, server_kwargs.get("health_path", "/health"))
        return base_url.rstrip("/"), None
    server = LocalServer(app, **server_kwargs).start()
    return server.base_url, server


@atexit.register
def _stop_all() -> None:
    for server in list(_RUNNING):
        with contextlib.suppress(Exception):
            server.stop(timeout=3)
