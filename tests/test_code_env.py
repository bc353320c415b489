"""The code feedback environment under attack, over its real WebSocket, plus the sandbox itself.

Every attack must come back as a clear observation (status, error, reward -0.5) while the server
stays healthy and serves the next episode correctly.
"""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

import pytest

from code_feedback_env.server.sandbox import Limits, run_python
from helpers.servers import LocalServer

ADD = "def add(a, b):\n    return a + b\n"


SANDBOX_TMP: list[str] = []  # this module's server puts its sandboxes' work dirs under here


@pytest.fixture(scope="module")
def code_server(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("sandboxes"))
    SANDBOX_TMP[:] = [tmp]
    limits = {"CODE_ENV_WALL_TIMEOUT_S": "2", "CODE_ENV_CPU_TIME_S": "1", "MAX_CONCURRENT_ENVS": "4",
              "TMPDIR": tmp}
    with LocalServer("code_feedback_env.server.app:app", env=limits, name="code_feedback",
                     log_dir=tmp_path_factory.mktemp("logs")) as server:
        yield server


@pytest.fixture
def env(code_server):
    from code_feedback_env import CodeFeedbackEnv

    with CodeFeedbackEnv(base_url=code_server.base_url).sync() as client:
        yield client


def submit(env, code, function_name=""):
    from code_feedback_env import CodeAction

    return env.step(CodeAction(code=code, function_name=function_name))


def sandbox_processes() -> list[int]:
    """Pids of this server's sandboxed processes still alive (there should be none between steps).

    They are recognised by their HOME, a work dir under this module's TMPDIR, so sandboxes of
    other servers running on the machine at the same time do not count.
    """
    marker = f"HOME={SANDBOX_TMP[0]}".encode() if SANDBOX_TMP else None
    pids = []
    for entry in os.scandir("/proc"):
        if marker and entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                environ = Path(entry.path, "environ").read_bytes()
            except OSError:
                continue
            if marker in environ:
                pids.append(int(entry.name))
    return pids


def assert_still_serving(server, env):
    """Health endpoint answers, and a fresh episode is graded correctly on the same session."""
    with urllib.request.urlopen(server.base_url + "/health", timeout=10) as resp:
        assert resp.status == 200
    obs = env.reset(task="add").observation
    assert obs.function_name == "add" and obs.tests_total == 3
    result = submit(env, ADD)
    assert result.observation.status == "ok" and result.reward == 1.0 and result.done
    assert sandbox_processes() == []


# -- the original tutorial's behaviour-------------------------------------------------------------------

def test_free_mode_matches_the_seed(env):
    ready = env.reset()
    assert ready.observation.status == "ok" and "Submit Python code" in ready.observation.output
    ok = submit(env, ADD, "add")
    assert ok.observation.status == "ok" and ok.reward == 1.0
    assert "'add' defined successfully" in ok.observation.output
    assert ok.observation.execution_time_ms > 0
    broken = submit(env, "def broken(", "broken")
    assert broken.observation.status == "error" and broken.reward == -0.5
    assert "SyntaxError" in broken.observation.error
    missing = submit(env, "x = 1", "add")
    assert missing.observation.status == "error" and "'add' is not defined" in missing.observation.error


def test_task_mode_grades_outside_the_sandbox(env):
    env.reset(task="fizzbuzz")
    half = submit(env, "def fizzbuzz(n):\n    return 'Fizz' if n % 3 == 0 else str(n)\n")
    obs = half.observation
    assert (obs.tests_passed, obs.tests_total) == (2, 4) and half.reward == 0.5 and not half.done
    assert "FAIL fizzbuzz(15) returned 'Fizz', expected 'FizzBuzz'" in obs.output
    printed = submit(env, "print('{\"ok\": true, \"value\": \"FizzBuzz\"}')\n"
                          "def fizzbuzz(n):\n    return None\n")
    assert printed.observation.tests_passed == 0  # printing fake results earns nothing
    wrong_name = submit(env, ADD, "add")
    assert wrong_name.observation.status == "error" and "'fizzbuzz'" in wrong_name.observation.error


def test_unknown_task_is_a_clear_error_and_session_survives(env):
    with pytest.raises(RuntimeError, match="Unknown task 'nope'.*add"):
        env.reset(task="nope")
    env.reset()
    assert submit(env, "print('still here')").observation.status == "ok"


# -- attacks over the WebSocket: each contained, reported, and the server keeps serving ---------

def test_infinite_loop_times_out(code_server, env):
    env.reset()
    result = submit(env, "while True:\n    pass\n")
    assert result.observation.status == "timeout" and result.reward == -0.5
    assert result.observation.limit and result.observation.execution_time_ms < 10_000
    assert_still_serving(code_server, env)


def test_memory_bomb_hits_the_memory_limit(code_server, env):
    env.reset()
    result = submit(env, "chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 2**20))\n")
    assert result.observation.status == "memory_limit" and result.reward == -0.5
    assert "MemoryError" in result.observation.error
    assert_still_serving(code_server, env)


def test_bounded_fork_loop_is_stopped_by_the_process_limit(code_server, env):
    env.reset()
    code = (
        "import os, time\nmade = 0\n"
        "for _ in range(10_000):\n"
        "    try:\n        pid = os.fork()\n"
        "    except OSError as exc:\n        print('refused after', made, type(exc).__name__)\n        break\n"
        "    if pid == 0:\n        time.sleep(1)\n        os._exit(0)\n"
        "    made += 1\n"
        "else:\n    print('not stopped', made)\n"
    )
    result = submit(env, code)
    out = result.observation.output or ""
    if "creating processes is disabled" in (result.observation.error or ""):
        assert result.observation.status == "error"  # fallback guard: no processes at all
    else:
        made = int(out.split("refused after")[1].split()[0])
        assert 0 < made < Limits().max_processes, out
    assert_still_serving(code_server, env)


def test_real_fork_bomb_is_contained(code_server, env):
    report = env.reset().observation
    result = submit(env, "import os\nwhile True:\n    try:\n        os.fork()\n"
                         "    except OSError:\n        pass\n")
    assert "kernel" in result.observation.sandbox.get("processes", "") or \
        "disabled" in (result.observation.error or ""), report
    assert result.observation.status in ("timeout", "error") and result.reward == -0.5
    assert_still_serving(code_server, env)


def test_reading_the_servers_source_is_refused(code_server, env):
    import code_feedback_env

    source = Path(code_feedback_env.__file__).parent / "server" / "app.py"
    env.reset()
    result = submit(env, f"print(open({str(source)!r}).read())")
    obs = result.observation
    assert obs.status == "error" and result.reward == -0.5
    assert "PermissionError" in obs.error and "create_app" not in (obs.output or "")
    listing = submit(env, "import os\nprint(os.listdir('/'))")
    assert listing.observation.status == "error" or "work" not in listing.observation.output
    assert_still_serving(code_server, env)


def test_network_socket_is_refused(code_server, env):
    port = int(code_server.base_url.rsplit(":", 1)[1])
    env.reset()
    result = submit(env, f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)")
    obs = result.observation
    assert obs.status == "error" and result.reward == -0.5
    assert any(s in obs.error for s in ("Network is unreachable", "network access is disabled",
                                         "Permission denied", "Connection refused"))
    assert_still_serving(code_server, env)


def test_megabytes_of_output_are_capped(code_server, env):
    env.reset()
    result = submit(env, "import sys\nfor _ in range(200_000):\n    print('x' * 99)\n")
    obs = result.observation
    assert obs.status == "output_limit" and result.reward == -0.5
    assert len(obs.output) < Limits().max_output_chars + 200 and "truncated" in obs.output
    assert_still_serving(code_server, env)


# -- the sandbox itself ------------------------------------------------------------------------

def test_sandbox_child_sees_no_secrets_and_only_its_work_dir(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    result = run_python("import os, sys\nprint(sorted(os.environ))\nprint(sys.flags.isolated)\n"
                        "open('scratch.txt', 'w').write('ok')\nprint(open('scratch.txt').read())")
    assert result.status == "ok", result.stderr
    assert "HF_TOKEN" not in result.stdout and "hf_secret_value" not in result.stdout
    assert result.stdout.splitlines()[1:] == ["1", "ok"]


def test_guard_fallback_refuses_files_and_sockets():
    files = run_python("open('/etc/hostname').read()", kernel_layers=False)
    assert files.status == "error" and "outside the work directory" in files.stderr
    net = run_python("import socket\nsocket.socket()", kernel_layers=False)
    assert net.status == "error" and "network access is disabled" in net.stderr
    assert "guard" in files.isolation["files"] and "guard" in files.isolation["network"]
    stdlib = run_python("import json, decimal\nprint(json.dumps(str(decimal.Decimal(1) / 8)))",
                        kernel_layers=False)
    assert stdlib.status == "ok" and stdlib.stdout.strip() == '"0.125"'


def test_result_channel_reports_return_values():
    result = run_python("def sq(x):\n    return x * x\n",
                        call={"function": "sq", "calls": [[3], ["a"]]})
    assert result.status == "ok"
    assert result.results[0] == {"ok": True, "value": 9}
    assert result.results[1]["ok"] is False and "TypeError" in result.results[1]["error"]


def test_a_fork_bomb_in_one_session_does_not_disturb_the_others(code_server):
    """Sessions run side by side; the bomb's session times out, the others are graded as usual."""
    from concurrent.futures import ThreadPoolExecutor

    from code_feedback_env import CodeFeedbackEnv

    def session(code):
        with CodeFeedbackEnv(base_url=code_server.base_url).sync() as client:
            client.reset(task="add")
            return submit(client, code)

    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = [pool.submit(session, code) for code in (bomb, ADD, ADD)]
        results = [f.result(timeout=60) for f in futures]
    assert results[0].observation.status in ("timeout", "error") and results[0].reward == -0.5
    assert [r.reward for r in results[1:]] == [1.0, 1.0]
    assert sandbox_processes() == []
