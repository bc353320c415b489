"""A fault-injecting TCP proxy on 127.0.0.1, in front of a real local server, for the reliability tests.

    with LocalServer("reasoning_gym_env.server.app:app") as server, FaultProxy(server.base_url) as proxy:
        proxy.wake_for(3)          # every new connection: HTTP 503 for 3 s (a Space waking)
        proxy.full_for(2)          # new WebSocket sessions: CAPACITY_REACHED for 2 s (a shared Space)
        proxy.drop_every = 7       # every 7th WebSocket frame from the server: the connection drops instead
        proxy.latency, proxy.jitter = 0.05, 0.02   # each client->server chunk waits 50 ms + up to 20 ms
        client = resilient(ReasoningGymEnv, base_url=proxy.url)

    For HTTP/SSE servers (ORS), whose requests share keep-alive connections:
        proxy = FaultProxy(server.base_url, one_request_per_connection=True)   # every request is seen
        proxy.cut_reply("/call", nth=2)            # the 2nd tool call from now: it runs, its reply is cut
        proxy.cut_reply("/call", after_event="task_id")   # cut after the server's first SSE event instead
        proxy.switch_upstream(other.base_url)      # a restarted Space: same URL, every session gone

It looks at the first request head of each connection (HTTP or a WebSocket upgrade) and otherwise
passes bytes through, so HTTP, SSE and WebSocket all go through it unchanged. A capacity refusal is
what OpenEnv's server sends (http_server.py, `SessionCapacityError`): it accepts the WebSocket, sends
one error frame `{"type": "error", "data": {"message": "Server at capacity: ...", "code":
"CAPACITY_REACHED", "active_sessions": N, "max_sessions": N}}` and closes (code 1000). A drop sends
nothing more: both sockets are cut, as a lost connection looks to a client. The reply that was
dropped had been computed by the server: the request took effect, the client never saw it.
`one_request_per_connection` asks the server to close each connection after its reply (the request's
`Connection` header becomes `close`), so each request arrives on a connection of its own and `cut_reply` can
pick it by its path. A cut reply was computed by the server (the proxy reads it to its end, or to the SSE
event named by `after_event`, which it passes on) and the connection is then cut: the request took effect,
the client never saw the rest.
`stats` counts what it did.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import random
import struct
import threading
import time
from urllib.parse import urlparse

_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class FaultProxy:
    def __init__(self, upstream: str, *, capacity: int = 4, seed: int = 0, one_request_per_connection: bool = False):
        self.upstream = _host_port(upstream)
        self.one_request_per_connection = one_request_per_connection
        self._cuts: list = []               # [path end, requests still to let through, after_event]
        self.capacity = capacity            # the N/N a refusal reports
        self.drop_every = 0                 # 0: never drop
        self.latency = 0.0
        self.jitter = 0.0
        self.wake_hangs = False             # waking: hang (no answer) instead of answering 503
        self._wake_until = 0.0
        self._full_until = 0.0
        self._frames = 0
        self._random = random.Random(seed)
        self.stats = {"connections": 0, "answered_503": 0, "hung": 0, "refused_full": 0, "dropped": 0,
                      "frames": 0, "cut_replies": 0, "switched": 0}
        self._loop = asyncio.new_event_loop()
        self._server = None
        self._thread = None
        self._tasks: set = set()
        self.port = None

    # -- faults, changeable while it runs --

    def wake_for(self, seconds: float) -> None:
        self._wake_until = time.monotonic() + seconds

    def full_for(self, seconds: float) -> None:
        self._full_until = time.monotonic() + seconds

    def cut_reply(self, path_part: str, nth: int = 1, after_event: str | None = None) -> None:
        """The `nth` request from now whose path ends with `path_part` reaches the server; its reply does not
        reach the client (only up to the SSE event `after_event`, when given): the connection is cut.
        Needs `one_request_per_connection`."""
        if not self.one_request_per_connection:
            raise ValueError("cut_reply needs FaultProxy(..., one_request_per_connection=True)")
        self._cuts.append([path_part, nth, after_event])

    def switch_upstream(self, upstream: str) -> None:
        """New connections go to `upstream`: a Space restarted behind the same URL (its sessions gone)."""
        self.upstream = _host_port(upstream)
        self.stats["switched"] += 1

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- lifecycle --

    def start(self) -> "FaultProxy":
        ready = threading.Event()

        def serve():
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._handle, "127.0.0.1", 0))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name="fault-proxy", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._thread is None:
            return

        async def shutdown():
            self._server.close()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            with contextlib.suppress(Exception):   # let them finish cancelling before the loop stops
                await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 2)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._thread = None

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- the proxy --

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        self.stats["connections"] += 1
        upstream_writer = None
        try:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            headers = _headers(head)
            is_ws = headers.get("upgrade", "").lower() == "websocket"
            now = time.monotonic()
            if now < self._wake_until:
                if self.wake_hangs:
                    self.stats["hung"] += 1
                    await asyncio.sleep(self._wake_until - now)
                    return
                self.stats["answered_503"] += 1
                body = b"Space is starting"
                writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
                             b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
                await writer.drain()
                return
            if is_ws and now < self._full_until:
                self.stats["refused_full"] += 1
                await self._refuse_full(writer, headers)
                return
            cut = None if is_ws else self._cut_for(head)
            if self.one_request_per_connection and not is_ws:
                head = _closing(head)
            up_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
            await self._delay()
            upstream_writer.write(head)
            await upstream_writer.drain()
            if cut is not None:
                await self._cut(cut, reader, up_reader, upstream_writer, writer, headers)
                return
            down = self._pipe_frames(up_reader, writer) if is_ws else self._pipe(up_reader, writer, delay=False)
            await _first_done(self._pipe(reader, upstream_writer, delay=True), down)
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            for w in (writer, upstream_writer):
                if w is not None:
                    with contextlib.suppress(Exception):
                        w.transport.abort()
            self._tasks.discard(task)

    def _cut_for(self, head: bytes):
        """The cut rule this request (its head) triggers, or None."""
        path = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        path = path[1].split("?")[0] if len(path) > 1 else ""
        for rule in self._cuts:
            if path.endswith(rule[0]):
                rule[1] -= 1
                if rule[1] == 0:
                    self._cuts.remove(rule)
                    return rule
                return None
        return None

    async def _cut(self, rule, reader, up_reader, upstream_writer, writer, headers: dict) -> None:
        """Send the request's body on, let the server answer, and cut the client off (see `cut_reply`)."""
        length = int(headers.get("content-length", "0") or 0)
        if length:
            upstream_writer.write(await reader.readexactly(length))
            await upstream_writer.drain()
        after_event = rule[2]
        seen = b""
        marker = f"event: {after_event}".encode() if after_event else None
        while True:
            try:
                data = await asyncio.wait_for(up_reader.read(65536), timeout=30)
            except asyncio.TimeoutError:
                break
            if not data:
                break
            seen += data
            if marker is not None:
                at = seen.find(marker)
                end = seen.find(b"\r\n\r\n", at) if at >= 0 else -1
                if end >= 0:                 # pass the reply on up to the end of that event, then cut
                    end += 4
                    if seen[end:end + 2] == b"\r\n":   # the end of its chunk (chunked transfer encoding)
                        end += 2
                    writer.write(seen[:end])
                    await writer.drain()
                    break
            elif b"event: end" in seen or b"event: error" in seen:
                break                        # the whole reply came: it took effect; the client gets none of it
        self.stats["cut_replies"] += 1

    async def _delay(self) -> None:
        if self.latency or self.jitter:
            await asyncio.sleep(self.latency + self._random.uniform(0, self.jitter))

    async def _pipe(self, reader, writer, delay: bool) -> None:
        while True:
            data = await reader.read(65536)
            if not data:
                return
            if delay:
                await self._delay()
            writer.write(data)
            await writer.drain()

    async def _pipe_frames(self, reader, writer) -> None:
        """Server -> client on a WebSocket: the 101 head, then frame by frame, dropping every Nth data frame."""
        writer.write(await reader.readuntil(b"\r\n\r\n"))
        await writer.drain()
        while True:
            first = await reader.readexactly(2)
            length = first[1] & 0x7F
            extra = b""
            if length == 126:
                extra = await reader.readexactly(2)
                length = struct.unpack(">H", extra)[0]
            elif length == 127:
                extra = await reader.readexactly(8)
                length = struct.unpack(">Q", extra)[0]
            mask = await reader.readexactly(4) if first[1] & 0x80 else b""
            payload = await reader.readexactly(length)
            opcode = first[0] & 0x0F
            if opcode in (0x1, 0x2):  # text, binary: a reply
                self._frames += 1
                self.stats["frames"] += 1
                if self.drop_every and self._frames % self.drop_every == 0:
                    self.stats["dropped"] += 1
                    return  # cut: the caller aborts both sockets
            writer.write(first + extra + mask + payload)
            await writer.drain()

    async def _refuse_full(self, writer, headers: dict) -> None:
        accept = base64.b64encode(hashlib.sha1(headers.get("sec-websocket-key", "").encode() + _WS_GUID).digest())
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
        message = {"type": "error", "data": {
            "message": f"Server at capacity: {self.capacity}/{self.capacity} sessions active. "
                       f"Cannot accept new connections.",
            "code": "CAPACITY_REACHED", "active_sessions": self.capacity, "max_sessions": self.capacity}}
        writer.write(_frame(0x1, json.dumps(message).encode()))
        writer.write(_frame(0x8, struct.pack(">H", 1000)))
        await writer.drain()
        await asyncio.sleep(0.2)  # let the client read them before the connection goes


def _host_port(url: str) -> tuple:
    parsed = urlparse(url)
    return parsed.hostname or "127.0.0.1", parsed.port or 80


def _closing(head: bytes) -> bytes:
    """The request head with `Connection: close`: the server closes the connection after this reply."""
    lines = [line for line in head[:-4].split(b"\r\n") if not line.lower().startswith(b"connection:")]
    return b"\r\n".join(lines + [b"Connection: close"]) + b"\r\n\r\n"


def _headers(head: bytes) -> dict:
    lines = head.decode("latin-1").split("\r\n")[1:]
    return {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines) if k}


def _frame(opcode: int, payload: bytes) -> bytes:
    n = len(payload)
    if n < 126:
        header = bytes([0x80 | opcode, n])
    elif n < 65536:
        header = bytes([0x80 | opcode, 126]) + struct.pack(">H", n)
    else:
        header = bytes([0x80 | opcode, 127]) + struct.pack(">Q", n)
    return header + payload


async def _first_done(*coros) -> None:
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
