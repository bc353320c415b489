"""How many concurrent sessions each local OpenEnv server holds, its step latency there, and its refusal past it.

    python -m benchmarks.env_capacity [--size tiny|full]

For each WebSocket server (reasoning_gym, textarena Wordle, code_feedback), started with
MAX_CONCURRENT_ENVS = the highest level: N sessions at once (1, 16, 64 in `full`) play episodes back to
back (benchmarks.env_servers' workloads), with p50/p99 step latency measured in the client; `held` is
the highest level with no session refused and no error. Then, with all `cap` sessions open, one more
is asked for: what comes back must be OpenEnv's CAPACITY_REACHED error frame naming cap/cap, the frame
helpers.servers.resilient waits on and then reports (`EnvironmentFull`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import tempfile
from pathlib import Path

from benchmarks.env_servers import PLANS, _new_loop, _ws_level
from helpers.servers import LocalServer

SIZES = {
    "tiny": {"levels": [1, 4], "seconds": 0.3, "warmup": 0.1, "servers": ["reasoning_gym"]},
    "full": {"levels": [1, 16, 64], "seconds": 3.0, "warmup": 0.5,
             "servers": ["reasoning_gym", "textarena", "code_feedback"]},
}
APPS = {"reasoning_gym": "reasoning_gym_env.server.app:app", "textarena": "textarena_env.server.app:app",
        "code_feedback": "code_feedback_env.server.app:app"}


async def over_capacity(base_url: str, cap: int, plan) -> dict:
    """Open `cap` sessions (a reset on each), then one more: return what the extra one was answered."""
    from websockets.asyncio.client import connect

    url = base_url.replace("http://", "ws://") + "/ws"
    first = plan.first_reset(0) if callable(plan.first_reset) else plan.first_reset
    held = []
    try:
        for _ in range(cap):
            ws = await connect(url, max_size=None, open_timeout=30)
            held.append(ws)
            await ws.send(json.dumps({"type": "reset", "data": first}))
            reply = json.loads(await ws.recv())
            if reply.get("type") != "observation":
                return {"refused_at": len(held), "reply": reply}
        extra = await connect(url, max_size=None, open_timeout=30)
        held.append(extra)
        with contextlib.suppress(Exception):
            await extra.send(json.dumps({"type": "reset", "data": first}))
        return {"refused_at": len(held), "reply": json.loads(await asyncio.wait_for(extra.recv(), 30))}
    finally:
        for ws in held:
            with contextlib.suppress(Exception):
                await ws.close()


def run(size: str = "full", log_dir: Path | None = None, out=print) -> dict:
    settings = SIZES[size]
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="bench-capacity-"))
    cap = max(settings["levels"])
    results = {}
    for name in settings["servers"]:
        if not importlib.util.find_spec(APPS[name].split(".")[0]):
            continue
        with LocalServer(APPS[name], env={"MAX_CONCURRENT_ENVS": str(cap)}, name=name, log_dir=log_dir) as server:
            levels = []
            for sessions in settings["levels"]:
                with asyncio.Runner(loop_factory=_new_loop) as runner:
                    level = runner.run(_ws_level(server.base_url, PLANS[name], sessions, settings["seconds"],
                                                 settings["warmup"]))
                levels.append(level)
                out(f"{name:14s} {sessions:3d} sessions: step p50 {level['step_p50_ms']} ms  p99 "
                    f"{level['step_p99_ms']} ms  {level['episodes_per_s']} episodes/s"
                    + (f"  refused {level['refused_sessions']}" if level["refused_sessions"] else "")
                    + (f"  errors {level['errors'][:1]}" if level["errors"] else ""))
            with asyncio.Runner(loop_factory=_new_loop) as runner:
                refusal = runner.run(over_capacity(server.base_url, cap, PLANS[name]))
            data = refusal["reply"].get("data") or {}
            out(f"{name:14s} session {refusal['refused_at']} of cap {cap}: {data.get('code')}: {data.get('message')}")
        held = max([lv["sessions"] for lv in levels if not lv["refused_sessions"] and not lv["errors"]], default=0)
        results[name] = {"cap": cap, "held": held, "levels": levels, "refusal": refusal}
    return {"size": size, "seconds_per_level": settings["seconds"], "servers": results, "log_dir": str(log_dir)}


def plot(result: dict, path: Path) -> Path:
    """Step latency (p50 solid, p99 dashed) against concurrent sessions, one colour a server."""
    from benchmarks import figures

    plt = figures.pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, data in result["servers"].items():
        xs = [lv["sessions"] for lv in data["levels"]]
        line, = ax.plot(xs, [lv["step_p50_ms"] or 0 for lv in data["levels"]], marker="o", label=f"{name} p50")
        ax.plot(xs, [lv["step_p99_ms"] or 0 for lv in data["levels"]], "--", marker="o", color=line.get_color(),
                label=f"{name} p99")
    ax.set(xscale="log", yscale="log", xlabel="concurrent sessions", ylabel="step latency (ms)",
           title="Sessions each server holds (127.0.0.1)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def markdown(result: dict) -> list[str]:
    """The table `make bench` writes: latency per level, and what the session past the cap was answered."""
    lines = ["", "| server | sessions | step p50 (ms) | step p99 (ms) | held | past the cap |", "|---|---:|---:|---:|---:|---|"]
    for name, data in result["servers"].items():
        answer = (data["refusal"]["reply"].get("data") or {}).get("code", "?")
        for lv in data["levels"]:
            lines.append(f"| {name} | {lv['sessions']} | {lv['step_p50_ms']} | {lv['step_p99_ms']} | {data['held']} | "
                         f"{answer} at session {data['refusal']['refused_at']} of {data['cap']} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    args = parser.parse_args()
    print(json.dumps(run(args.size), indent=2))


if __name__ == "__main__":
    main()
