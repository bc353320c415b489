"""A fault-injecting TCP proxy on 127.0.0.1, in front of a real local server, for the reliability tests.

    with LocalServer("reasoning_gym_env.server.app:app") as server, FaultProxy(server.base_url) as proxy:
        proxy.wake_for(3)          # every new connection: HTTP 503 for 3 s (a Space waking)
        proxy.full_for(2)          # new WebSocket sessions: CAPACITY_REACHED for 2 s (a shared Space)
        proxy.drop_every = 7       # every 7th WebSocket frame from the server: the connection drops instead
        proxy.latency, proxy.jitter = 0.05, 0.02   # each client->server chunk waits 50 ms + up to 20 ms
        client = resilient(ReasoningGymEnv, base_url=proxy.url)

It looks at the first request head of each connection (HTTP or a WebSocket upgrade) and otherwise
passes bytes through, so HTTP, SSE and WebSocket all go through it unchanged. A capacity refusal is
what OpenEnv's server sends (http_server.py, `SessionCapacityError`): it accepts the WebSocket, sends
one error frame `{"type": "error", "data": {"message": "Server at capacity: ...", "code":
"CAPACITY_REACHED", "active_sessions": N, "max_sessions": N}}` and closes (code 1000). A drop sends
nothing more: both sockets are cut, as a lost connection looks to a client. The reply that was
dropped had been computed by the server: the request took effect, the client never saw it.
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
    def __init__(self, upstream: str, *, capacity: int = 4, seed: int = 0):
        parsed = urlparse(upstream)
        self.upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
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
                      "frames": 0}
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
            for task in list(self._tasks):
                task.cancel()
            await asyncio.sleep(0)

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
            up_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
            await self._delay()
            upstream_writer.write(head)
            await upstream_writer.drain()
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
