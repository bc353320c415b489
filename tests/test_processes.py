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
