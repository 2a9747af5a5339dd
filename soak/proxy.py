"""A TCP proxy between the system's processes and Redis that can cut every connection or swallow Redis's replies.

Given several upstreams it is also a small load balancer: each new connection goes to the next one in turn,
and to the one after when connecting fails or takes longer than `connect_timeout_s` (as a balancer's
health checks would take a host out), so callers keep one address while a host is unreachable.

It runs an asyncio loop in its own thread. Swallowing a reply is the fault that makes a client retry a
command whose effect was applied: during the window, a reply from Redis is dropped now and then and its
connection closed at once (a connection that lost part of a reply is out of step anyway), so the client
sees a connection error after the command ran, which is when redis-py retries it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time


class _Pipe:
    def __init__(self, writer: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.client, self.upstream = writer, upstream
        self.dropping = False  # replies may be swallowed

    def close(self) -> None:
        for w in (self.client, self.upstream):
            with contextlib.suppress(Exception):
                w.close()


class Proxy:
    def __init__(self, upstream_port: int = 0, *, upstreams: list[tuple[str, int]] | None = None,
                 host: str = "127.0.0.1", connect_timeout_s: float = 5.0) -> None:
        self.upstreams = upstreams or [("127.0.0.1", upstream_port)]
        self.host, self.connect_timeout_s = host, connect_timeout_s
        self._next = 0
        #: Connections each upstream took, by (host, port).
        self.served: dict[tuple[str, int], int] = dict.fromkeys(self.upstreams, 0)
        self.loop = asyncio.new_event_loop()
        self.pipes: set[_Pipe] = set()
        self.drop_until = 0.0
        self.port = 0
        self.dropped_bytes = 0
        self.dropped_replies = 0
        self.drop_p = 0.0
        self.rng = random.Random(0)
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), name="soak-proxy", daemon=True)
        self.thread.start()
        ready.wait(10)

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._accept, self.host, 0))
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        for _ in self.upstreams:
            upstream = self.upstreams[self._next % len(self.upstreams)]
            self._next += 1
            try:
                opened = await asyncio.wait_for(asyncio.open_connection(*upstream), self.connect_timeout_s)
            except (OSError, TimeoutError):
                continue
            self.served[upstream] += 1
            return opened
        return None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        opened = await self._connect()
        if opened is None:
            writer.close()
            return
        up_reader, up_writer = opened
        pipe = _Pipe(writer, up_writer)
        pipe.dropping = time.monotonic() < self.drop_until
        self.pipes.add(pipe)
        try:
            await asyncio.gather(self._pump(reader, up_writer, pipe, False),
                                 self._pump(up_reader, writer, pipe, True))
        finally:
            self.pipes.discard(pipe)
            pipe.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pipe: _Pipe,
                    replies: bool) -> None:
        try:
            while data := await reader.read(65536):
                if replies and pipe.dropping and self.rng.random() < self.drop_p:
                    self.dropped_bytes += len(data)
                    self.dropped_replies += 1
                    break
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            pipe.close()

    # -- faults (called from other threads) ---------------------------------------------------
    def cut(self) -> int:
        """Close every connection now; returns how many."""
        return asyncio.run_coroutine_threadsafe(self._cut(), self.loop).result(10)

    async def _cut(self) -> int:
        pipes = list(self.pipes)
        for pipe in pipes:
            pipe.close()
        return len(pipes)

    def drop_replies(self, seconds: float, probability: float = 0.3) -> None:
        """For `seconds`, swallow each reply with `probability` and close its connection."""
        def start() -> None:
            self.drop_p = probability
            self.drop_until = time.monotonic() + seconds
            for pipe in self.pipes:
                pipe.dropping = True

        def end() -> None:
            for pipe in self.pipes:
                pipe.dropping = False
        self.loop.call_soon_threadsafe(start)
        time.sleep(seconds)
        self.loop.call_soon_threadsafe(end)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._cut(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
