"""helpers.servers: start, reach, fail clearly, and never leave a server behind."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest

from helpers.servers import LocalServer, ServerError, check_reachable, free_port, server_or_url
from helpers.servers import forkserver
from helpers.servers.forkserver import VARIABLE, ForkedServer

APP = "tests.server_apps:app"


def get_json(url):
    import json
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def test_starts_on_loopback_with_env_and_stops(tmp_path):
    with LocalServer(APP, env={"GREETING": "hi"}, log_dir=tmp_path) as server:
        assert server.base_url.startswith("http://127.0.0.1:")
        body = get_json(server.base_url + "/health")
        assert body["greeting"] == "hi"
        pid = server.process.pid
    assert not server.is_running()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_factory_apps(tmp_path):
    with LocalServer("tests.server_apps:make_app", factory=True, log_dir=tmp_path) as server:
        assert get_json(server.base_url + "/health")["status"] == "ok"


def test_port_in_use_is_a_clear_error(tmp_path):
    with LocalServer(APP, log_dir=tmp_path) as first:
        with pytest.raises(ServerError, match=f"Port {first.port} .* already in use"):
            LocalServer(APP, port=first.port, log_dir=tmp_path, name="second").start()
        assert get_json(first.base_url + "/health")["status"] == "ok"  # the first one lost nothing


def test_the_port_is_held_from_the_moment_it_is_chosen(tmp_path, monkeypatch):
    """The race CI met: the OS named a free port, another process bound it before the server did, and the server
    died with "address already in use". Now the port is bound before the server process starts: another process
    trying to bind it then fails, and the server still starts and answers on it."""
    import helpers.servers.local as servers

    real_launch, others = servers.launch, []

    def launch_after_a_competitor(argv, **kwargs):
        competitor = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            competitor.bind(("127.0.0.1", int(argv[argv.index("--port") + 1])))
            others.append("bound it")
        except OSError:
            others.append("refused")
        finally:
            competitor.close()
        return real_launch(argv, **kwargs)

    monkeypatch.setattr(servers, "launch", launch_after_a_competitor)
    with LocalServer(APP, log_dir=tmp_path) as server:
        assert get_json(server.base_url + "/health")["status"] == "ok"
    assert others == ["refused"]


def test_failed_start_shows_the_log_tail(tmp_path):
    with pytest.raises(ServerError) as err:
        LocalServer("tests.server_apps:broken_app", factory=True, log_dir=tmp_path, name="broken").start()
    assert "refuses to start" in str(err.value)  # the child's traceback, from its log file
    assert "broken.log" in str(err.value)


def test_default_log_folder_is_removed_on_stop_and_kept_on_failure():
    with LocalServer(APP) as server:
        get_json(server.base_url + "/health")
        assert server.log_path.exists()   # the log is there while the server runs
    assert not server.log_dir.exists()    # repeated runs leave no folder behind in /tmp

    broken = LocalServer("tests.server_apps:broken_app", factory=True, name="broken")
    with pytest.raises(ServerError, match="broken.log"):
        broken.start()
    broken.stop()
    assert "refuses to start" in broken.log_path.read_text()   # the log the error names is still readable
    broken.log_dir.joinpath("broken.log").unlink()
    broken.log_dir.rmdir()


def test_unreachable_url_is_named_in_the_error():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerError, match=url.replace(".", r"\.")):
        check_reachable(url, timeout=2)
    with pytest.raises(ServerError, match="leave the base URL empty"):
        server_or_url(url, APP)


def test_server_or_url_starts_locally_or_uses_the_given_url(tmp_path):
    url, server = server_or_url(None, APP, log_dir=tmp_path)
    try:
        assert server is not None and url == server.base_url
        again, none = server_or_url(url + "/", APP)
        assert none is None and again == url
    finally:
        server.stop()


def test_server_dies_with_its_parent(tmp_path):
    """A killed notebook kernel must not leave a server holding a port, nor the fork server it started. (This parent
    finds a stale fork server socket in its environment and starts its own.)"""
    script = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {str(tmp_path.parent)!r})
        from helpers.servers import LocalServer
        s = LocalServer({APP!r}, log_dir={str(tmp_path)!r}).start()
        print(s.process.pid, s.port, os.environ.get("{VARIABLE}", "-"), flush=True)
        time.sleep(60)
    """)
    env = {**os.environ, VARIABLE: str(tmp_path / "no-fork-server-here")}
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env,
                              cwd=os.path.dirname(os.path.dirname(__file__)))
    child_pid, port, socket_path = parent.stdout.readline().split()
    child_pid = int(child_pid)
    if forkserver.FORKS:   # (Linux)
        assert socket_path != env[VARIABLE] and os.path.exists(socket_path)   # its own fork server
    os.kill(parent.pid, signal.SIGKILL)  # no atexit, no finally: like a dying kernel
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            if not os.path.exists(socket_path):
                break
        time.sleep(0.2)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child_pid, signal.SIGKILL)
        pytest.fail(f"the server (alive: {os.path.exists(f'/proc/{child_pid}')}) or its fork server (socket left: "
                    f"{os.path.exists(socket_path)}) outlived their parent by 10 s")


# The fork server (helpers/servers/forkserver.py): a server forked from it must be what a fresh process would be.

@pytest.fixture
def forks(monkeypatch):
    """This process's fork server, even where the caller turned it off (Linux only: forkserver.FORKS)."""
    if not forkserver.FORKS:
        pytest.skip("servers are forked on Linux only")
    if forkserver.turned_off():
        monkeypatch.delenv(VARIABLE)


def test_a_forked_server_is_what_a_fresh_process_would_be(tmp_path, monkeypatch, forks):
    """Its own session (stop() signals its group), the requester's environment, folder and import path, its output
    in its log, and its exit code (here: killed) reported to the requester, not to the fork server alone."""
    monkeypatch.chdir(tmp_path)
    with LocalServer(APP, env={"GREETING": "forked"}, log_dir=tmp_path) as server:
        assert isinstance(server.process, ForkedServer)
        me = get_json(server.base_url + "/whoami")
        assert me["pid"] == me["pgid"] == server.process.pid
        assert me["ppid"] != os.getpid()   # the fork server's child
        assert (me["greeting"], me["cwd"], me["path0"]) == ("forked", str(tmp_path), str(tmp_path))
        assert server.process.poll() is None
        os.killpg(server.process.pid, signal.SIGKILL)
        assert server.process.wait(timeout=10) == -signal.SIGKILL
    with pytest.raises(ServerError, match="exited with code 1") as err:   # a failing app: its traceback in the log
        LocalServer("tests.server_apps:broken_app", factory=True, log_dir=tmp_path, name="broken").start()
    assert "refuses to start" in str(err.value)


def test_off_or_refused_the_server_starts_as_a_fresh_process(tmp_path, monkeypatch, forks):
    """AGENT_RL_FORKSERVER=off, or a fork server of another checkout (or Python), or one sent garbage before: the
    server is a child process of ours, as it was before the fork server existed."""
    with LocalServer(APP, log_dir=tmp_path) as server:   # a fork server is running for this process
        assert isinstance(server.process, ForkedServer)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as garbage:
        garbage.connect(os.environ[VARIABLE])
        garbage.sendall(b"not a request")
    monkeypatch.setattr(forkserver, "_HELPERS", str(tmp_path / "another-checkout" / "helpers"))
    with LocalServer(APP, log_dir=tmp_path) as server:
        assert isinstance(server.process, subprocess.Popen)
        assert get_json(server.base_url + "/whoami")["ppid"] == os.getpid()
    monkeypatch.undo()
    monkeypatch.setenv(VARIABLE, "off")
    with LocalServer(APP, env={"GREETING": "fresh"}, log_dir=tmp_path) as server:
        assert isinstance(server.process, subprocess.Popen)
        assert get_json(server.base_url + "/whoami")["greeting"] == "fresh"


def test_a_fork_server_that_dies_loses_no_server_and_the_next_start_gets_a_new_one(tmp_path, forks):
    """The fork server killed while a server it forked runs (in a process of its own here, with its own fork server):
    the server keeps serving and its owner still sees it running (poll does not block), sees it end when it is
    stopped, and the next server starts, forked by a new fork server; the dead one's socket file is removed."""
    script = textwrap.dedent(f"""
        import os, signal, sys, json, urllib.request
        import psutil
        from helpers.servers import LocalServer
        first = LocalServer({APP!r}, log_dir={str(tmp_path)!r}).start()
        old = os.environ["{VARIABLE}"]
        forker, = [p for p in psutil.Process().children() if "helpers.servers.forkserver" in " ".join(p.cmdline())]
        forker.kill()
        forker.wait(10)
        running = first.process.poll() is None and first.is_running()
        answers = json.loads(urllib.request.urlopen(first.base_url + "/health", timeout=5).read())["status"]
        pid = first.process.pid
        first.stop()
        stopped = not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        second = LocalServer({APP!r}, log_dir={str(tmp_path)!r}, name="second").start()
        print(json.dumps({{"running": running, "answers": answers, "stopped": stopped, "litter": os.path.exists(old),
                           "new": os.environ["{VARIABLE}"] != old, "forked": type(second.process).__name__}}))
        second.stop()
    """)
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(__file__)))
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.splitlines()[-1]) == {"running": True, "answers": "ok", "stopped": True,
                                                       "litter": False, "new": True, "forked": "ForkedServer"}
