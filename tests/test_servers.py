"""helpers.servers: start, reach, fail clearly, and never leave a server behind."""

import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest

from helpers.servers import LocalServer, ServerError, check_reachable, free_port, server_or_url

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
    import socket

    import helpers.servers.local as servers

    real_popen, others = servers.subprocess.Popen, []

    def popen_after_a_competitor(cmd, **kwargs):
        competitor = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            competitor.bind(("127.0.0.1", int(cmd[cmd.index("--port") + 1])))
            others.append("bound it")
        except OSError:
            others.append("refused")
        finally:
            competitor.close()
        return real_popen(cmd, **kwargs)

    monkeypatch.setattr(servers.subprocess, "Popen", popen_after_a_competitor)
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
    """A killed notebook kernel must not leave a server holding a port."""
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(tmp_path.parent)!r})
        from helpers.servers import LocalServer
        s = LocalServer({APP!r}, log_dir={str(tmp_path)!r}).start()
        print(s.process.pid, s.port, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              cwd=os.path.dirname(os.path.dirname(__file__)))
    child_pid, port = map(int, parent.stdout.readline().split())
    os.kill(parent.pid, signal.SIGKILL)  # no atexit, no finally: like a dying kernel
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        os.kill(child_pid, signal.SIGKILL)
        pytest.fail("the server outlived its parent by 10 s")
