"""helpers.compute.processes with one process (a notebook, Colab, `python script.py`): every function is a plain
call, nothing is recorded as run for others, nothing initializes torch.distributed. Two real processes:
tests/test_scale_out.py."""

from helpers.compute import processes


def test_one_process_runs_everything_plainly(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(processes, "ONCE", {"ran": [], "received": []})
    calls = []

    def start(port, *, name):
        calls.append((port, name))
        return f"http://127.0.0.1:{port}", "server"

    assert processes.process_count() == 1 and processes.process_index() == 0 and processes.is_main_process()
    assert processes.on_main(lambda x, y=1: x + y, 2, y=3) == 5
    assert processes.one_server(start, 8000, name="env") == ("http://127.0.0.1:8000", "server")
    assert processes.share({"a": 1}) == {"a": 1} and processes.from_every_process(7) == [7]
    assert calls == [(8000, "env")] and processes.ONCE == {"ran": [], "received": []}


def test_the_launchers_variables_name_the_process(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert processes.process_index() == 1 and processes.process_count() == 2 and not processes.is_main_process()


def test_the_weights_digest_tells_weights_apart():
    import torch

    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    assert processes.weights_digest(a) == processes.weights_digest(b)
    with torch.no_grad():
        b.bias[0] += 1e-6
    assert processes.weights_digest(a) != processes.weights_digest(b)


GROUP_SCRIPT = """
import atexit, os, sys
sys.path.insert(0, {root!r})
out = os.path.join({folder!r}, "process" + os.environ["RANK"])
def last_word():   # registered before helpers: it runs after helpers' exit handler
    import torch.distributed as dist
    open(out, "w").write("group still up" if dist.is_initialized() else "group ended")
atexit.register(last_word)
import helpers
import torch, torch.distributed as dist
dist.init_process_group("gloo")
box = [None] * 2
dist.all_gather_object(box, dist.get_rank())
"""


def test_two_processes_end_their_group_before_the_interpreter_does(tmp_path):
    # a gloo group left to the interpreter's teardown aborts such a launch now and then (docs/scale-out.md section 7)
    import subprocess
    import sys
    from pathlib import Path

    from helpers.servers.local import free_port

    script = tmp_path / "group.py"
    script.write_text(GROUP_SCRIPT.format(root=str(Path(__file__).parents[1]), folder=str(tmp_path)))
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                          str(free_port()), str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert [(tmp_path / f"process{rank}").read_text() for rank in (0, 1)] == ["group ended"] * 2
