"""A parent that has imported the server libraries once and forks each local server from itself.

Every `LocalServer` used to be a fresh `python -m helpers.servers.serve`, which imports openenv (gradio, mcp, fastapi)
and the environment's own library again: 4-6 s of CPU per server, most of a server's start
(docs/measurements.md, "Start-up imports"). The fork server imports them once, then forks a child per server that runs
`helpers.servers.serve` exactly as the command line would (its own session, its log file, the requester's
environment, working folder and import path). The second server of a notebook starts in a fraction of a second.

One fork server serves the process that started it and every process started below it (a notebook's kernel, the
processes of `accelerate launch`): they find it through the variable AGENT_RL_FORKSERVER (its socket). It starts no
threads of its own (forking a process while another of its threads holds a lock is unsafe), exits when the process
that started it exits, and reports each server's exit code to the process that asked for that server. Set
AGENT_RL_FORKSERVER=off to start every server as a fresh process instead; anything that goes wrong with the fork
server falls back to that, too, and so does every platform but Linux.

    python -m helpers.servers.forkserver --fd N --parent-pid PID    (started by `launch`, never by hand)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from helpers.servers import serve

VARIABLE = "AGENT_RL_FORKSERVER"
# Imported once by the fork server: what every OpenEnv server imports, and the environment libraries our envs/ serve.
# Only installed libraries, never an environment's own module: a learner who edits envs/... gets the edit on restart.
PRELOAD = ("uvicorn", "fastapi", "websockets", "openenv.core.env_server", "reasoning_gym", "textarena")
# Linux only: macOS can crash a child forked after its system frameworks loaded, and Windows has no fork.
FORKS = sys.platform.startswith("linux")
_HEADER = struct.Struct("!I")
_HELPERS = str(Path(__file__).resolve().parents[1])   # this checkout's helpers package
_lock = threading.Lock()


def launch(argv: list[str], *, env: dict[str, str], cwd: str, log_path: str, listener: socket.socket):
    """Start `python -m helpers.servers.serve *argv` serving on `listener`: forked by the fork server when one is
    available (started here on first use), else as a fresh process. Returns a Popen, or a `ForkedServer` with the
    part of Popen's interface a server's owner uses (pid, poll, wait, returncode)."""
    if FORKS and not turned_off():
        with contextlib.suppress(OSError, ValueError, KeyError):
            with _lock:
                conn = _connect()
            return _request(conn, argv, env=env, cwd=cwd, log_path=log_path, listener=listener)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "helpers.servers.serve", *argv, "--fd", str(listener.fileno())],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=cwd,
            start_new_session=True, pass_fds=(listener.fileno(),))


def turned_off() -> bool:
    return os.environ.get(VARIABLE, "").lower() in ("off", "0", "no", "false")


def ensure_running() -> str:
    """Start this process's fork server now unless one answers at AGENT_RL_FORKSERVER; return its socket's path.
    `launch` does this on first use; a test session does it first, so its kernels share one instead of each
    starting its own."""
    with _lock:
        _connect().close()
    return os.environ[VARIABLE]


class ForkedServer:
    """A server process forked by the fork server: its pid, and its exit code as the fork server reports it."""

    def __init__(self, conn: socket.socket, pid: int):
        self.conn, self.pid, self.returncode = conn, pid, None
        self.args = ["helpers.servers.serve (forked)", str(pid)]

    def poll(self) -> int | None:
        if self.returncode is None:
            if self.conn is not None:
                if select.select([self.conn], [], [], 0)[0]:
                    self._read_exit()
            elif not serve.process_alive(self.pid):   # the fork server is gone: the kernel says whether the pid lives
                self.returncode = -signal.SIGKILL   # its real exit code went with the fork server
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            if self.conn is not None:
                select.select([self.conn], [], [], left)
            else:
                time.sleep(0.1 if left is None else min(0.1, left))
        return self.returncode

    def _read_exit(self) -> None:
        data, conn, self.conn = self.conn.recv(64), self.conn, None
        conn.close()
        if data:
            self.returncode = int(json.loads(data)["exit"])


def with_helpers_importable(env: dict[str, str]) -> dict[str, str]:
    """`env` with this checkout first on PYTHONPATH: a process started from another folder (a notebook's) must still
    import `helpers`."""
    repo_root = str(Path(_HELPERS).parent)
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in (repo_root, env.get("PYTHONPATH")) if p)}


def _connect() -> socket.socket:
    """A connection to this process's fork server (inherited through VARIABLE, or started now)."""
    path = os.environ.get(VARIABLE)
    if path:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
            return conn
        except OSError as exc:
            conn.close()
            if isinstance(exc, ConnectionRefusedError):   # a killed fork server's socket file: nobody listens
                with contextlib.suppress(OSError):
                    os.unlink(path)
    path = os.path.join(tempfile.gettempdir(), f"agent-rl-forkserver-{os.getpid()}-{time.monotonic_ns() % 10**6}")
    env = with_helpers_importable(dict(os.environ))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with listener:   # bound here, so requests queue while the fork server imports
        listener.bind(path)
        listener.listen(64)
        subprocess.Popen(
            [sys.executable, "-m", "helpers.servers.forkserver", "--fd", str(listener.fileno()),
             "--parent-pid", str(os.getpid()), "--path", path],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
            start_new_session=True, pass_fds=(listener.fileno(),))
    os.environ[VARIABLE] = path
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    return conn


def _request(conn: socket.socket, argv, *, env, cwd, log_path, listener) -> ForkedServer:
    with contextlib.ExitStack() as on_error:
        on_error.callback(conn.close)
        body = json.dumps({"argv": list(argv), "env": dict(env), "cwd": str(cwd), "log": str(log_path),
                           "executable": sys.executable, "helpers": _HELPERS}).encode()
        socket.send_fds(conn, [_HEADER.pack(len(body)) + body], [listener.fileno()])
        conn.settimeout(120)   # the first request waits for the fork server's imports
        reply = json.loads(_read_line(conn))
        conn.settimeout(None)
        if "pid" not in reply:
            raise ValueError(reply.get("error", reply))
        on_error.pop_all()
    return ForkedServer(conn, int(reply["pid"]))


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            raise OSError("the fork server closed the connection")
        data += chunk
    return data


# ---- the fork server process ----

def _receive(conn: socket.socket) -> tuple[dict, int]:
    conn.settimeout(30)
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 1)
    if not fds:
        raise OSError("no socket was passed")
    while len(data) < _HEADER.size or len(data) < _HEADER.size + _HEADER.unpack_from(data)[0]:
        chunk = conn.recv(1 << 16)
        if not chunk:
            os.close(fds[0])
            raise OSError("the request was cut short")
        data += chunk
    conn.settimeout(None)
    return json.loads(data[_HEADER.size:]), fds[0]


def _become_server(request: dict, fd: int, base_path: list[str]) -> int:
    """In the forked child: turn into what `python -m helpers.servers.serve` would be, and run it."""
    os.setsid()
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout.reconfigure(line_buffering=True, write_through=True)
    sys.stderr.reconfigure(line_buffering=True, write_through=True)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [request["cwd"], *extra, *base_path]
    importlib.invalidate_caches()
    sys.argv = ["helpers.servers.serve", *request["argv"], "--fd", str(fd), "--forked"]
    try:
        serve.main()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def _serve_requests(listener: socket.socket, parent_pid: int) -> None:
    base_path = [p for p in sys.path[1:] if p not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    waiting: dict[int, socket.socket] = {}   # server pid -> the connection of whoever asked for it
    while serve.process_alive(parent_pid) and os.getppid() != 1:
        ready = select.select([listener], [], [], 0.2)[0]
        while True:   # report the servers that exited
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = waiting.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError), conn:
                    conn.sendall(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
        if not ready:
            continue
        conn, _ = listener.accept()
        try:
            request, fd = _receive(conn)
        except (OSError, ValueError):
            conn.close()
            continue
        if (request.get("executable"), request.get("helpers")) != (sys.executable, _HELPERS):
            os.close(fd)   # another Python or another checkout: the requester starts its server itself
            with contextlib.suppress(OSError), conn:
                conn.sendall(json.dumps({"error": f"this fork server runs {sys.executable} with {_HELPERS}"}
                                        ).encode() + b"\n")
            continue
        pid = os.fork()
        if pid == 0:   # the child: nothing of the fork server's sockets stays open
            code = 1
            try:
                listener.close()
                conn.close()
                for other in waiting.values():
                    other.close()
                code = _become_server(request, fd, base_path)
            except BaseException:   # noqa: BLE001 - the traceback goes to the server's log, like a process's would
                traceback.print_exc()
            finally:
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(code)
        os.close(fd)
        try:
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            waiting[pid] = conn
        except OSError:   # the requester gave up waiting and started the server itself: this one must not serve
            conn.close()
            os.kill(pid, signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fd", type=int, required=True, help="the bound, listening unix socket")
    parser.add_argument("--parent-pid", type=int, required=True, help="exit when this process exits")
    parser.add_argument("--path", help="the socket's file, removed at exit")
    args = parser.parse_args()
    # (`python -m` imported helpers first, so its start-up settings hold here, as in every process we start)
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    try:
        _serve_requests(socket.socket(fileno=args.fd), args.parent_pid)
    finally:
        if args.path:
            with contextlib.suppress(OSError):
                os.unlink(args.path)


if __name__ == "__main__":
    main()
