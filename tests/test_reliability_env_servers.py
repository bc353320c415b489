"""Environment servers under bad input, over their real WebSocket protocol (frames written by hand).

Every case ends the same way: the server still plays a correct episode, so a bad client can cost
itself its session but never the server. Cases: malformed JSON and wrong shapes, unknown message
types, wrong field types, a several-MB action, a frame over the server's size limit, a step before
reset and after done, thousands of rapid connects/disconnects (clean and abrupt), and sessions
beyond the cap (a prompt CAPACITY_REACHED error, not a hang, and no slot leaked).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from typing import Callable

import httpx
import psutil
import pytest
import reasoning_gym
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from helpers.servers import LocalServer

CAP = 8  # MAX_CONCURRENT_ENVS of the servers under test
REPLY_TIMEOUT = 10.0  # seconds: any reply slower than this is a hang
MAX_ERROR_REPLY_BYTES = 10_000  # an error reply quotes a short prefix of bad input, never the input itself
CHAIN_SUM = {"min_terms": 2, "max_terms": 3, "min_digits": 2, "max_digits": 2}


@dataclass
class WsEnv:
    """How to play one correct episode of an environment with raw frames."""

    name: str
    app: str
    reset_data: dict
    right_step: Callable[[dict], dict]  # reset observation -> step data that wins
    wrong_type_step: dict  # step data with a field of the wrong type
    any_step: dict  # some step (scored or not)
    big_field: str  # a string field of the action, for the several-MB action
    server_env: dict = field(default_factory=dict)
    # reasoning_gym and Wordle refuse to score a step before reset / after done; echo and the code
    # env serve a step at any time (free mode), so for them only "answered, session alive" holds.
    episodic: bool = True
    churn: int = 500  # rapid connects/disconnects (2,000 for reasoning_gym; 500 keeps CI short)
    won: Callable[[dict], bool] = lambda data: data["done"] is True and data["reward"] == 1.0


def _rg_right_step(observation: dict) -> dict:
    entry = reasoning_gym.create_dataset("chain_sum", seed=2, size=10, **CHAIN_SUM)[0]
    assert observation["question"] == entry["question"]
    return {"answer": entry["answer"]}


ADD = "def add(a, b):\n    return a + b\n"
ENVS = [
    WsEnv("reasoning_gym", "reasoning_gym_env.server.app:app",
          {"dataset_name": "chain_sum", "dataset_config": CHAIN_SUM, "seed": 2, "size": 10},
          _rg_right_step, {"answer": {"nested": ["not", "a", "string"]}}, {"answer": "12"}, "answer", churn=2000),
    WsEnv("textarena", "textarena_env.server.app:app", {"word": "crane"},
          lambda observation: {"message": "[crane]"}, {"message": ["crane"]}, {"message": "[crane]"},
          "message"),
    WsEnv("echo", "echo_env.server.app:app", {}, lambda observation: {"message": "hello"},
          {"message": 42.5}, {"message": "hi"}, "message", episodic=False,
          won=lambda data: data["observation"]["echoed_message"] == "hello"
          and abs(data["reward"] - 0.5) < 1e-9),
    WsEnv("code_feedback", "code_feedback_env.server.app:app", {"task": "add"},
          lambda observation: {"code": ADD}, {"code": ["def add(a, b): return a + b"]},
          {"code": "print(1)"}, "code", episodic=False),
]


@pytest.fixture(scope="module", params=ENVS, ids=[e.name for e in ENVS])
def served(request, tmp_path_factory):
    spec = request.param
    server = LocalServer(spec.app, env={"MAX_CONCURRENT_ENVS": str(CAP), **spec.server_env},
                         name=spec.name, log_dir=tmp_path_factory.mktemp(f"{spec.name}-logs"))
    with server:
        yield spec, server
        assert server.is_running(), f"the {spec.name} server died:\n{server.log_tail()}"


def ws_url(server: LocalServer) -> str:
    return server.base_url.replace("http://", "ws://") + "/ws"


async def ask(ws, message) -> dict:
    """Send one frame (a dict is JSON-encoded, str/bytes go as they are) and read the reply."""
    await ws.send(message if isinstance(message, (str, bytes)) else json.dumps(message))
    return json.loads(await asyncio.wait_for(ws.recv(), REPLY_TIMEOUT))


async def reset_or_refusal(ws, spec: WsEnv) -> dict:
    """The reply to a reset on a fresh socket: an observation, or the server's capacity refusal.

    At capacity the server speaks first (a CAPACITY_REACHED frame, then the close), so our reset
    may meet a closed socket; the refusal is still buffered and is what we return.
    """
    try:
        await ws.send(json.dumps({"type": "reset", "data": spec.reset_data}))
    except ConnectionClosed:
        pass
    try:
        return json.loads(await asyncio.wait_for(ws.recv(), REPLY_TIMEOUT))
    except ConnectionClosed as exc:
        return {"type": "closed", "data": {"code": None, "close": str(exc)}}


def is_capacity_refusal(reply: dict) -> bool:
    return reply.get("type") == "error" and reply["data"].get("code") == "CAPACITY_REACHED"


async def play_correct_episode(ws, spec: WsEnv) -> None:
    reset = await ask(ws, {"type": "reset", "data": spec.reset_data})
    assert reset["type"] == "observation", reset
    assert reset["data"]["done"] is False
    step = await ask(ws, {"type": "step", "data": spec.right_step(reset["data"]["observation"])})
    assert step["type"] == "observation", step
    assert spec.won(step["data"]), step


async def open_every_slot(spec: WsEnv, server: LocalServer, n: int = CAP) -> list:
    """`n` sockets, each with a session reset. The server frees a slot just after its socket
    closes, so a slot closed a moment ago may still be taken: retry for REPLY_TIMEOUT seconds,
    then fail naming what still held it."""
    deadline = time.monotonic() + REPLY_TIMEOUT
    while True:
        sockets = []
        try:
            for _ in range(n):
                sockets.append(await connect(ws_url(server), open_timeout=REPLY_TIMEOUT))
            replies = [await reset_or_refusal(ws, spec) for ws in sockets]
        except BaseException:
            for ws in sockets:
                await ws.close()
            raise
        not_opened = [r for r in replies if r["type"] != "observation"]
        if not not_opened:
            return sockets
        for ws in sockets:
            await ws.close()
        assert all(is_capacity_refusal(r) for r in not_opened), not_opened[0]
        assert time.monotonic() < deadline, f"slots still taken after {REPLY_TIMEOUT:.0f} s: {not_opened[0]}"
        await asyncio.sleep(0.1)


async def server_still_plays(spec: WsEnv, server: LocalServer) -> None:
    """A new session plays a correct episode (retrying briefly while closed slots are freed)."""
    [ws] = await open_every_slot(spec, server, n=1)
    try:
        await play_correct_episode(ws, spec)
    finally:
        await ws.close()


def run(coro):
    return asyncio.run(coro)


# -- frames the session survives -------------------------------------------------------------


def test_malformed_frames_get_error_replies_and_the_session_lives_on(served):
    spec, server = served
    bad_frames = {
        "{not json": "INVALID_JSON",
        "": "INVALID_JSON",
        json.dumps({"type": "dance"}): "UNKNOWN_TYPE",
        json.dumps({}): "UNKNOWN_TYPE",  # no type at all
        json.dumps({"type": 5}): "UNKNOWN_TYPE",
        json.dumps({"type": "step", "data": "answer"}): "VALIDATION_ERROR",
        json.dumps({"type": "step", "data": {}}): "VALIDATION_ERROR",  # missing field
        json.dumps({"type": "step", "data": spec.wrong_type_step}): "VALIDATION_ERROR",
        json.dumps({"type": "reset", "data": [1, 2]}): "VALIDATION_ERROR",
    }

    async def scenario():
        async with connect(ws_url(server)) as ws:
            for frame, code in bad_frames.items():
                reply = await ask(ws, frame)
                assert reply["type"] == "error" and reply["data"]["code"] == code, (frame, reply)
                assert reply["data"]["message"]
            await play_correct_episode(ws, spec)  # same connection, still fine

    run(scenario())


def test_step_before_reset_and_after_done_are_answered(served):
    spec, server = served

    async def scenario():
        async with connect(ws_url(server)) as ws:
            before = await ask(ws, {"type": "step", "data": spec.any_step})
            _assert_refused_or_unscored(before, spec)
            await play_correct_episode(ws, spec)
            after = await ask(ws, {"type": "step", "data": spec.any_step})
            _assert_refused_or_unscored(after, spec)
            await play_correct_episode(ws, spec)

    run(scenario())


def _assert_refused_or_unscored(reply: dict, spec: WsEnv) -> None:
    """Either an error frame or an observation that says why it was not scored; never a reward."""
    if reply["type"] == "error":
        assert reply["data"]["message"]
        return
    assert reply["type"] == "observation", reply
    if not spec.episodic:
        return  # served like any other step
    data = reply["data"]
    assert data["reward"] in (None, 0, 0.0), reply
    observation = data["observation"]
    why = observation.get("error") or observation.get("last_message") or ""
    assert why, f"an unscorable step came back without saying why: {reply}"


def test_an_action_of_several_megabytes_is_answered(served):
    spec, server = served
    key = spec.big_field

    async def scenario():
        async with connect(ws_url(server), max_size=None) as ws:
            await ask(ws, {"type": "reset", "data": spec.reset_data})
            start = time.monotonic()
            reply = await ask(ws, {"type": "step", "data": {**spec.any_step, key: "7" * (5 * 1024 * 1024)}})
            assert time.monotonic() - start < REPLY_TIMEOUT
            assert reply["type"] in ("observation", "error"), str(reply)[:300]
            if reply["type"] == "observation" and spec.episodic:
                assert reply["data"]["reward"] != 1.0  # five million sevens are not the answer
            await play_correct_episode(ws, spec)

    run(scenario())


# -- frames that are not messages -------------------------------------------------------------


@pytest.mark.parametrize("frame", [
    "[1, 2, 3]", "42", "null", '"reset"', "[" * 100_000 + "]" * 100_000, b"\x00\x01binary",
], ids=["json-array", "json-number", "json-null", "json-string", "deep-nesting", "binary-frame"])
def test_frames_that_are_not_messages_get_an_error_saying_what_to_send(served, frame):
    """OpenEnv 0.10.0 closed the session with SESSION_ERROR 'text' (binary) or "'list' object has
    no attribute 'get'"; our servers' WebSocketGuard answers INVALID_JSON naming what to send, and
    the session goes on."""
    spec, server = served

    async def scenario():
        async with connect(ws_url(server), close_timeout=2) as ws:
            await ask(ws, {"type": "reset", "data": spec.reset_data})
            reply = await ask(ws, frame)
            assert reply["type"] == "error" and reply["data"]["code"] == "INVALID_JSON", reply
            message = reply["data"]["message"]
            assert "Send one JSON object per text frame" in message and '"type": "step"' in message, message
            await play_correct_episode(ws, spec)  # the same session still plays

    run(scenario())


def test_clients_that_vanish_mid_request_cost_one_log_line_each(served):
    """50 clients that send a request and reset the TCP connection before the reply: OpenEnv
    0.10.0 logged an ~80-line traceback for each (4,100 lines); now one line per client at most."""
    spec, server = served
    before = server.log_path.read_text(errors="replace").splitlines()

    async def scenario():
        for _ in range(50):
            ws = await connect(ws_url(server), open_timeout=REPLY_TIMEOUT)
            try:
                await ws.send(json.dumps({"type": "reset", "data": spec.reset_data}))
            except ConnectionClosed:  # refused at capacity: slots of aborted clients free shortly
                pass
            ws.transport.abort()
            await asyncio.sleep(0.02)
        await asyncio.sleep(1.0)
        await server_still_plays(spec, server)

    run(scenario())
    new = server.log_path.read_text(errors="replace").splitlines()[len(before):]
    assert "Traceback (most recent call last):" not in "\n".join(new), "\n".join(new)[-3000:]
    assert len(new) <= 50, f"{len(new)} log lines for 50 dropped clients:\n" + "\n".join(new[:20])


def test_a_frame_over_the_size_limit_closes_that_connection(served):
    spec, server = served

    async def scenario():
        async with connect(ws_url(server), close_timeout=2) as ws:
            await ask(ws, {"type": "reset", "data": spec.reset_data})
            await ws.send(json.dumps({"type": "step", "data": {"answer": "9" * (20 * 1024 * 1024)}}))
            with pytest.raises(ConnectionClosed) as info:
                await asyncio.wait_for(ws.recv(), REPLY_TIMEOUT)
            assert info.value.rcvd is not None and info.value.rcvd.code == 1009  # "message too big"
        await server_still_plays(spec, server)

    run(scenario())


# -- bounded replies: bad input costs the server a short answer -------------------------------


def assert_bounded_error(text: str, what: str) -> None:
    assert len(text) <= MAX_ERROR_REPLY_BYTES, f"{what}: a {len(text):,}-byte reply: {text[:300]}"


def test_error_replies_quote_a_short_prefix_of_the_input_not_all_of_it(served):
    """A 15 MiB field came back whole inside the error (a 16.7 MB HTTP 422, a 15.7 MB error frame);
    now the reply quotes its start and size. The server still scores or refuses it as before."""
    spec, server = served
    huge = "x" * (15 * 1024 * 1024)

    async def scenario():
        async with connect(ws_url(server), max_size=None) as ws:
            await ask(ws, {"type": "reset", "data": spec.reset_data})
            await ws.send(json.dumps({"type": "step", "data": {**spec.any_step, spec.big_field: huge}}))
            raw = await asyncio.wait_for(ws.recv(), REPLY_TIMEOUT)
            reply = json.loads(raw)
            if reply["type"] == "error":
                assert_bounded_error(raw, "WebSocket step")
                assert "15,728,640 characters" in raw, raw  # says how big the value was
            else:
                assert len(raw) < 64_000, raw[:300]  # scored (echo/code refuse, the others say why)
            await play_correct_episode(ws, spec)

    run(scenario())
    response = httpx.post(server.base_url + "/step", json={"action": {**spec.any_step, spec.big_field: huge}},
                          timeout=60)
    if response.status_code >= 400:
        assert_bounded_error(response.text, f"HTTP /step ({response.status_code})")
    else:
        assert len(response.text) < 64_000, response.text[:300]


def test_an_integer_too_long_to_read_is_a_validation_error_and_the_session_lives_on(served):
    """JSON with a 5,000-digit number: Python refuses to read integers over 4,300 digits, and
    OpenEnv closed the session (SESSION_ERROR). Now it is a VALIDATION_ERROR like any bad field."""
    spec, server = served

    async def scenario():
        async with connect(ws_url(server)) as ws:
            await ask(ws, {"type": "reset", "data": spec.reset_data})
            reply = await ask(ws, '{"type": "step", "data": {"%s": %s}}' % (spec.big_field, "9" * 5000))
            assert reply["type"] == "error" and reply["data"]["code"] == "VALIDATION_ERROR", reply
            assert "4300 digits" in reply["data"]["message"] and "as strings" in reply["data"]["message"]
            await play_correct_episode(ws, spec)

    run(scenario())


def test_an_http_body_over_the_frame_limit_is_refused_at_once(served):
    """The WebSocket refuses frames over 16 MiB (1009); HTTP took any body. Now both have the
    limit: a 413 naming it, whether the size is declared (content-length) or the body is chunked."""
    spec, server = served
    body = json.dumps({"action": {spec.big_field: "y" * (17 * 1024 * 1024)}}).encode()
    declared = httpx.post(server.base_url + "/step", content=body, timeout=60,
                          headers={"content-type": "application/json"})

    def chunks():
        for start in range(0, len(body), 1 << 20):
            yield body[start:start + (1 << 20)]

    chunked = httpx.post(server.base_url + "/step", content=chunks(), timeout=60,
                         headers={"content-type": "application/json"})
    for response in (declared, chunked):
        assert response.status_code == 413, (response.status_code, response.text[:300])
        assert "16,777,216 bytes" in response.json()["detail"] and len(response.text) < 500
    run(server_still_plays(spec, server))


# -- fuzzing: random and oversized frames -----------------------------------------------------


def _random_json(rng: random.Random, depth: int = 0):
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False, 0, -1, 2**63, 1e308, -0.5, float(rng.randrange(100))])
    if kind == 2:
        return "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(rng.randrange(30)))
    if kind == 3:
        return "[" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(5)) + "]"
    if kind == 4:
        return rng.randrange(-10**6, 10**6)
    if kind == 5:
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(5))]
    keys = ["type", "data", "message", "answer", "code", "seed", "word", "dataset_name", "dataset_config",
            "size", "task", "tool_name", "arguments", "jsonrpc", "method", "params", "id"]
    return {rng.choice(keys): _random_json(rng, depth + 1) for _ in range(rng.randrange(5))}


def fuzz_frames(rng: random.Random, spec: WsEnv, n: int):
    """`n` frames: random JSON, messages with random data, garbage text and bytes, and a few
    oversized ones (a 1-8 MB field, a 5,000-digit number, 50,000-deep nesting, 20,000 keys)."""
    kinds = ["json", "message", "message", "message", "text", "bytes"]
    for i in range(n):
        if i % 50 == 25:
            yield json.dumps({"type": "close"})  # the server ends the session: the test opens a new one
            continue
        if i % 40 == 39:
            yield rng.choice([
                json.dumps({"type": "step", "data": {spec.big_field: "z" * rng.randrange(1 << 20, 8 << 20)}}),
                '{"type": "step", "data": {"%s": %s}}' % (spec.big_field, "7" * 5000),
                '{"type": "reset", "data": ' + "[" * 50_000 + "]" * 50_000 + "}",
                json.dumps({"type": "reset", "data": {f"k{j}": j for j in range(20_000)}}),
            ])
            continue
        kind = rng.choice(kinds)
        if kind == "json":
            yield json.dumps(_random_json(rng))
        elif kind == "message":
            data = _random_json(rng)
            data = data if isinstance(data, dict) else {spec.big_field: data}
            yield json.dumps({"type": rng.choice(["reset", "step", "step", "state", "mcp", "close", "bogus"]),
                              "data": data})
        elif kind == "text":
            yield "".join(chr(rng.randrange(32, 127)) for _ in range(rng.randrange(1, 200)))
        else:
            yield bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))


def server_rss(server: LocalServer) -> int:
    """The server's anonymous resident memory (Linux: rss less the file-backed and shared pages; elsewhere rss).
    The libraries' file-backed pages count in rss and come and go with memory pressure from whatever runs beside
    (a notebook on the other xdist worker), which a growth bound must not read as the server's own; a leak is
    anonymous memory and still counts in full."""
    info = psutil.Process(server.process.pid).memory_info()
    return info.rss - getattr(info, "shared", 0)


def test_fuzzed_frames_leave_the_server_up_its_replies_bounded_and_its_slots_free(served):
    """300 random and oversized frames over a few sessions (a session that closes is reopened):
    every reply arrives in time, every error reply is bounded, the server's memory stays within
    100 MiB of where it started, and afterwards every slot opens and plays a correct game."""
    spec, server = served
    rng = random.Random(37)
    memory_margin = 100 * 1024 * 1024  # grew 3-7 MiB when written; 8 MB frames leave copies in the allocator
    before = server_rss(server)
    stats = {"frames": 0, "errors": 0, "observations": 0, "closed": 0, "largest_error": 0}

    async def scenario():
        ws = await connect(ws_url(server), max_size=None, close_timeout=1)
        try:
            for frame in fuzz_frames(rng, spec, 300):
                stats["frames"] += 1
                try:
                    await ws.send(frame)
                    raw = await asyncio.wait_for(ws.recv(), REPLY_TIMEOUT)
                except ConnectionClosed:
                    stats["closed"] += 1  # a "close" message (or a SESSION_ERROR): open a new session
                    ws = await connect(ws_url(server), max_size=None, close_timeout=1)
                    continue
                reply = json.loads(raw)
                if reply.get("type") == "error":
                    stats["errors"] += 1
                    stats["largest_error"] = max(stats["largest_error"], len(raw))
                    assert_bounded_error(raw, f"frame {stats['frames']} ({str(frame)[:80]!r})")
                else:
                    stats["observations"] += 1
                    assert len(raw) < 256_000, raw[:300]
        finally:
            await ws.close()
        sockets = await open_every_slot(spec, server)
        try:
            await play_correct_episode(sockets[0], spec)
        finally:
            for socket in sockets:
                await socket.close()

    run(scenario())
    grown = server_rss(server) - before
    print(f"{spec.name}: {stats}, RSS grew {grown / 2**20:.0f} MiB")
    assert stats["errors"] > 50 and stats["observations"] > 10, stats
    assert grown < memory_margin, f"RSS grew {grown / 2**20:.0f} MiB over {stats}"
    assert server.is_running()


# -- connection churn and capacity -----------------------------------------------------------


def test_thousands_of_rapid_connects_and_disconnects_leak_nothing(served):
    spec, server = served
    total, parallel = spec.churn, 12

    refused = []

    async def one(i: int) -> None:
        ws = await connect(ws_url(server), open_timeout=REPLY_TIMEOUT, close_timeout=1)
        kind = i % 4
        try:
            if kind == 0:  # clean close
                await ws.close()
            elif kind == 1:  # abrupt: TCP dropped without a close handshake
                ws.transport.abort()
            elif kind == 2:  # a request, then gone before the reply
                await ws.send(json.dumps({"type": "reset", "data": {}}))
                ws.transport.abort()
            else:  # a full reset, then a polite close message
                reply = await ask(ws, {"type": "reset", "data": spec.reset_data})
                if reply["type"] == "error":
                    # 12 clients churning against 8 slots: a slot whose client vanished a moment
                    # ago may not be free yet, and then the refusal must say so.
                    assert reply["data"]["code"] == "CAPACITY_REACHED", reply
                    refused.append(i)
                    return
                await ws.send(json.dumps({"type": "close"}))
                await ws.close()
        except ConnectionClosed as exc:  # refused at capacity before our frame went out
            assert exc.rcvd is not None and exc.rcvd.code == 1000, exc
            refused.append(i)

    async def scenario():
        start = time.monotonic()
        queue = iter(range(total))

        async def worker():
            for i in queue:
                await one(i)

        await asyncio.gather(*(worker() for _ in range(parallel)))
        elapsed = time.monotonic() - start
        assert elapsed < 30, f"{total} connects took {elapsed:.1f} s"
        assert len(refused) < total // 2, f"{len(refused)} of {total} connections refused"

        # No slot leaked: all CAP sessions can be open at once again.
        sockets = await open_every_slot(spec, server)
        try:
            await play_correct_episode(sockets[-1], spec)
        finally:
            for ws in sockets:
                await ws.close()
        return elapsed

    run(scenario())


def test_sessions_beyond_the_cap_are_refused_at_once(served):
    spec, server = served

    async def scenario():
        sockets = await open_every_slot(spec, server)  # slots of earlier tests are free
        try:
            extra = await connect(ws_url(server), close_timeout=2)
            start = time.monotonic()
            # The server speaks first: a refusal frame, then the close. Whatever we send may
            # meet a closed socket, but the refusal is still there to read.
            try:
                await extra.send(json.dumps({"type": "reset", "data": spec.reset_data}))
            except ConnectionClosed:
                pass
            try:
                refusal = json.loads(await asyncio.wait_for(extra.recv(), REPLY_TIMEOUT))
            except ConnectionClosed:
                pytest.fail("the refused session was closed without saying why")
            assert time.monotonic() - start < 5
            assert refusal["type"] == "error" and refusal["data"]["code"] == "CAPACITY_REACHED"
            assert f"{CAP}/{CAP} sessions active" in refusal["data"]["message"]
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(extra.recv(), REPLY_TIMEOUT)
            # the open sessions were not disturbed
            await play_correct_episode(sockets[0], spec)
        finally:
            for ws in sockets:
                await ws.close()
        await server_still_plays(spec, server)  # a freed slot is usable again

    run(scenario())


def unexpected_tracebacks(log: str) -> list[str]:
    """Tracebacks in a uvicorn log. OpenEnv 0.10.0 logged one per client that vanished with a
    request in flight; WebSocketGuard turns those into one WARNING line, so none is expected."""
    return [block for block in log.split("Traceback (most recent call last):")[1:]]


def test_server_log_has_no_unexpected_tracebacks(served):
    spec, server = served
    unexpected = unexpected_tracebacks(server.log_path.read_text(errors="replace"))
    assert not unexpected, unexpected[0][-3000:]
