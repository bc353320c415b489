"""Environment servers: episodes/s and per-call latency at 1-128 concurrent sessions on 127.0.0.1.

    python -m benchmarks.env_servers [--size tiny|full]

Each server runs in its own process (helpers.servers.LocalServer, MAX_CONCURRENT_ENVS=256); one
client process drives N sessions at once with asyncio, each playing episodes back to back:

- reasoning_gym (WebSocket): `reset` (next question) + one `step` (an answer) = one episode.
- textarena Wordle (WebSocket): `reset(word=...)` + three guesses, the last one right.
- code_feedback (WebSocket): `reset(task="add")` + one submission, run in a fresh sandboxed
  process (code_feedback_env.server.sandbox) and graded: most of its time is that process.
- calculator_env (ORS over HTTP/SSE, the `openreward` SDK's async client): open a session +
  `get_prompt` ("reset"), one `answer` tool call ("step"), close the session.
- baseline: the same reasoning_gym environment behind OpenEnv's defaults (`create_app` without
  `max_concurrent_envs`, so 1 session; plain uvicorn with INFO logging). Sessions past the first
  are refused and counted as `refused_sessions`: GRPO would crash on the first one.

Latencies are measured in the client (send to reply, so they include the client's own event loop
at high concurrency); p50/p99 over every call that started inside the measuring window.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import figures
from helpers.servers import LocalServer, ServerError, free_port

SIZES = {
    "tiny": {"concurrency": [1, 8], "seconds": 1.0, "warmup": 0.2},
    "full": {"concurrency": [1, 8, 32, 64, 128], "seconds": 5.0, "warmup": 1.0},
}
SERVER_CAP = 256  # MAX_CONCURRENT_ENVS of our servers: above the highest concurrency measured
CHAIN_SUM = {"min_terms": 2, "max_terms": 3, "min_digits": 2, "max_digits": 2}
REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class WsPlan:
    """What one session sends: a first reset, then episodes of (reset, steps...) until done."""

    first_reset: Any  # dict, or a function of the worker id
    reset: dict
    steps: list


PLANS = {
    "reasoning_gym": WsPlan(
        first_reset=lambda wid: {"dataset_name": "chain_sum", "dataset_config": CHAIN_SUM,
                                 "seed": wid, "size": 1000},
        reset={}, steps=[{"answer": "0"}]),
    "textarena": WsPlan(first_reset={"word": "crane"}, reset={"word": "crane"},
                        steps=[{"message": "[slate]"}, {"message": "[pious]"}, {"message": "[crane]"}]),
    "code_feedback": WsPlan(first_reset={"task": "add"}, reset={"task": "add"},
                            steps=[{"code": "def add(a, b):\n    return a + b\n"}]),
}


@dataclass
class Recorder:
    """Calls and episodes inside the measuring window [start, end)."""

    start: float
    end: float
    latencies: dict = field(default_factory=lambda: {"reset": [], "step": []})
    episodes: int = 0
    refused: int = 0
    errors: list = field(default_factory=list)

    def call(self, kind: str, began: float, ended: float) -> None:
        if self.start <= began < self.end:
            self.latencies[kind].append(ended - began)

    def episode(self, ended: float) -> None:
        if self.start <= ended < self.end:
            self.episodes += 1


def _percentile_ms(values: list, q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(q / 100 * (len(ordered) - 1)))))
    return round(ordered[index] * 1000, 3)


def _summary(rec: Recorder, sessions: int, seconds: float) -> dict:
    calls = sum(len(v) for v in rec.latencies.values())
    return {
        "sessions": sessions,
        "episodes": rec.episodes,
        "episodes_per_s": round(rec.episodes / seconds, 1),
        "calls_per_s": round(calls / seconds, 1),
        "reset_p50_ms": _percentile_ms(rec.latencies["reset"], 50),
        "reset_p99_ms": _percentile_ms(rec.latencies["reset"], 99),
        "step_p50_ms": _percentile_ms(rec.latencies["step"], 50),
        "step_p99_ms": _percentile_ms(rec.latencies["step"], 99),
        "refused_sessions": rec.refused,
        "errors": rec.errors[:3],
    }


# -- WebSocket (OpenEnv) -----------------------------------------------------------------------


async def _ws_session(url: str, plan: WsPlan, wid: int, rec: Recorder, opened: asyncio.Barrier,
                      go: asyncio.Event) -> None:
    from websockets.asyncio.client import connect

    perf = time.perf_counter
    ws = None
    try:
        ws = await connect(url, max_size=None, open_timeout=60)
        first = plan.first_reset(wid) if callable(plan.first_reset) else plan.first_reset
        await ws.send(json.dumps({"type": "reset", "data": first}))
        reply = json.loads(await ws.recv())
        if reply.get("type") == "error":
            rec.refused += 1  # e.g. CAPACITY_REACHED on the baseline
            ws = None  # the server closes it
    except Exception as exc:  # noqa: BLE001 - a refused/failed session is a result, not a crash
        rec.refused += 1
        rcvd = getattr(exc, "rcvd", None)
        if rcvd is None or rcvd.code != 1000:  # 1000 = closed by a capacity refusal: expected
            rec.errors.append(f"{type(exc).__name__}: {exc}")
        ws = None
    await opened.wait()
    await go.wait()
    if ws is None:
        return
    reset_frame = json.dumps({"type": "reset", "data": plan.reset})
    step_frames = [json.dumps({"type": "step", "data": s}) for s in plan.steps]
    try:
        while perf() < rec.end:
            began = perf()
            await ws.send(reset_frame)
            await ws.recv()
            rec.call("reset", began, perf())
            for frame in step_frames:
                began = perf()
                await ws.send(frame)
                reply = json.loads(await ws.recv())
                ended = perf()
                rec.call("step", began, ended)
                if reply.get("type") != "observation":
                    raise RuntimeError(f"unexpected reply: {str(reply)[:200]}")
                if reply["data"].get("done"):
                    rec.episode(ended)
                    break
    except Exception as exc:  # noqa: BLE001
        rec.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        await ws.close()


async def _ws_level(base_url: str, plan: WsPlan, sessions: int, seconds: float, warmup: float) -> dict:
    url = base_url.replace("http://", "ws://") + "/ws"
    opened, go = asyncio.Barrier(sessions + 1), asyncio.Event()
    rec = Recorder(start=float("inf"), end=float("inf"))
    tasks = [asyncio.create_task(_ws_session(url, plan, i, rec, opened, go)) for i in range(sessions)]
    await opened.wait()  # every session connected (or refused) before the clock starts
    now = time.perf_counter()
    rec.start, rec.end = now + warmup, now + warmup + seconds
    go.set()
    await asyncio.gather(*tasks)
    return _summary(rec, sessions, seconds)


# -- ORS over HTTP/SSE (openreward SDK) ------------------------------------------------------


async def _ors_level(base_url: str, sessions: int, seconds: float, warmup: float) -> dict:
    from openreward import AsyncOpenReward

    from calculator_env.tasks import SPLIT_SIZES

    client = AsyncOpenReward(base_url=base_url)
    env = client.environments.get("CalculatorEnv")
    rec = Recorder(start=float("inf"), end=float("inf"))
    perf = time.perf_counter
    go = asyncio.Event()

    async def worker(wid: int) -> None:
        await go.wait()
        index = wid
        try:
            while perf() < rec.end:
                began = perf()
                async with env.session(split="train", index=index % SPLIT_SIZES["train"]) as session:
                    await session.get_prompt()
                    rec.call("reset", began, perf())
                    began = perf()
                    await session.call_tool("answer", {"answer": "0"})
                    rec.call("step", began, perf())
                rec.episode(perf())
                index += sessions
        except Exception as exc:  # noqa: BLE001
            rec.errors.append(f"{type(exc).__name__}: {exc}")

    async with env.session(split="train", index=0) as session:  # first-use costs, off the clock
        await session.get_prompt()
    tasks = [asyncio.create_task(worker(i)) for i in range(sessions)]
    now = perf()
    rec.start, rec.end = now + warmup, now + warmup + seconds
    go.set()
    await asyncio.gather(*tasks)
    await client.environments.aclose()
    return _summary(rec, sessions, seconds)


# -- servers -----------------------------------------------------------------------------------


class BaselineServer:
    """OpenEnv's defaults: `python -m uvicorn benchmarks.baseline_app:app` (INFO logs to a file)."""

    def __init__(self, log_dir: Path):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_dir) / "baseline.log"
        self.process = None

    def start(self) -> "BaselineServer":
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "benchmarks.baseline_app:app",
                 "--host", "127.0.0.1", "--port", str(self.port)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                cwd=REPO_ROOT, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(f"baseline server exited: {self.log_path.read_text()[-2000:]}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(self.base_url + "/health", timeout=2):
                    return self
            time.sleep(0.2)
        self.stop()
        raise ServerError("baseline server did not start within 120 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self.process = None


def _server_specs(log_dir: Path) -> dict:
    """name -> (server object, protocol, what it serves). Only environments present in this checkout."""
    import importlib.util

    from helpers.openreward.local import LocalORSServer

    env = {"MAX_CONCURRENT_ENVS": str(SERVER_CAP)}
    specs = {
        "reasoning_gym": (LocalServer("reasoning_gym_env.server.app:app", env=env, name="reasoning_gym",
                                      log_dir=log_dir), "websocket", "reasoning_gym chain_sum, reset + 1 step"),
        "reasoning_gym_baseline": (BaselineServer(log_dir), "websocket",
                                   "same env, OpenEnv defaults: 1 session, uvicorn INFO logging"),
    }
    if importlib.util.find_spec("textarena_env"):
        specs["textarena"] = (LocalServer("textarena_env.server.app:app", env=env, name="textarena",
                                          log_dir=log_dir), "websocket", "Wordle-v0, reset + 3 guesses")
    if importlib.util.find_spec("code_feedback_env"):
        specs["code_feedback"] = (LocalServer("code_feedback_env.server.app:app", env=env, name="code_feedback",
                                              log_dir=log_dir), "websocket",
                                  "task 'add', reset + 1 sandboxed run of a correct solution")
    if importlib.util.find_spec("calculator_env"):
        specs["calculator_ors"] = (LocalORSServer("calculator_env.server:app", log_dir=log_dir),
                                   "http/sse", "ORS calculator_env, session + prompt + 1 tool call")
    return specs


def _start_all(servers: list) -> None:
    """Start servers in parallel (each spends seconds importing), re-raising the first failure."""
    failures = []

    def start(server):
        try:
            server.start()
        except Exception as exc:  # noqa: BLE001
            failures.append(exc)

    threads = [threading.Thread(target=start, args=(s,)) for s in servers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]


def _new_loop():
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def run(size: str = "full", log_dir: Path | None = None, out=print) -> dict:
    """Benchmark every server present; returns {"servers": {name: {..., "levels": [...]}}, ...}."""
    import tempfile

    settings = SIZES[size]
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="bench-servers-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    specs = _server_specs(log_dir)
    servers = [s for s, _, _ in specs.values()]
    results = {}
    try:
        _start_all(servers)
        for name, (server, protocol, what) in specs.items():
            levels = []
            base_url = server.url if hasattr(server, "url") else server.base_url
            for sessions in settings["concurrency"]:
                with asyncio.Runner(loop_factory=_new_loop) as runner:
                    if protocol == "http/sse":
                        level = runner.run(_ors_level(base_url, sessions, settings["seconds"], settings["warmup"]))
                    else:
                        plan = PLANS["reasoning_gym" if name.startswith("reasoning_gym") else name]
                        level = runner.run(_ws_level(base_url, plan, sessions, settings["seconds"],
                                                     settings["warmup"]))
                levels.append(level)
                out(f"{name:24s} {sessions:4d} sessions: {level['episodes_per_s']:8.1f} episodes/s  "
                    f"step p50 {level['step_p50_ms']} ms  p99 {level['step_p99_ms']} ms"
                    + (f"  refused {level['refused_sessions']}" if level["refused_sessions"] else "")
                    + (f"  errors {level['errors'][:1]}" if level["errors"] else ""))
            results[name] = {"protocol": protocol, "workload": what, "levels": levels,
                             "cap": 1 if name.endswith("baseline") else SERVER_CAP}
    finally:
        for server in servers:
            with contextlib.suppress(Exception):
                server.stop()
    return {"size": size, "seconds_per_level": settings["seconds"], "servers": results,
            "log_dir": str(log_dir)}


def plot(result: dict, path: Path) -> Path:
    plt = figures.pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name, data in result["servers"].items():
        xs = [lv["sessions"] for lv in data["levels"]]
        style = "--" if name.endswith("baseline") else "-"
        left.plot(xs, [lv["episodes_per_s"] for lv in data["levels"]], style, marker="o", label=name)
        right.plot(xs, [lv["step_p99_ms"] or 0 for lv in data["levels"]], style, marker="o", label=name)
    left.set(xscale="log", xlabel="concurrent sessions", ylabel="episodes / s",
             title="Throughput (127.0.0.1)")
    right.set(xscale="log", yscale="log", xlabel="concurrent sessions", ylabel="step p99 (ms)",
              title="Step latency, 99th percentile")
    left.legend(fontsize=8)
    return figures.save(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    args = parser.parse_args()
    print(json.dumps(run(args.size), indent=2))


if __name__ == "__main__":
    main()
