"""Ending held streams and blocking waits when a web process is asked to stop, or when a stream's client goes away.

Event streams, subscriptions and blocking sends stay in flight for minutes, each blocked in Redis for the job's
next change: left alone they would hold a stopping process (SIGTERM, a deploy) for its whole graceful timeout
and then be cut off mid-stream. `Drain.stop` ends each of them as its own deadline would: a stream closes cleanly
(its client reconnects, with Last-Event-ID, to a process still serving) and a blocking send answers with the
task as it stands. `HangUpWatch` ends a stream's or a blocking send's reads as soon as its client hangs up.
Rule: nothing held outlives the process's stop or its client, so a stream's Redis connection and slot go back
within moments.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Interrupted(Exception):
    """Raised into a blocking read that `Drain.stop` cut short."""


def _current_greenlet() -> Any:
    """The running greenlet when gevent serves this process (the web worker), else None: a thread blocked
    in a socket read cannot be interrupted, and sees the stop at its next read instead."""
    try:
        from gevent import getcurrent, monkey
    except ImportError:  # pragma: no cover - gevent is a dependency of the web worker
        return None
    return getcurrent() if monkey.is_module_patched("socket") else None


def _reader() -> Any:
    """Who is reading: the running greenlet under gevent, else the thread."""
    me = _current_greenlet()
    return me if me is not None else threading.get_ident()


class Drain:
    """One per process, shared by every service that reads held streams."""

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._reading: set[Any] = set()
        #: Readers whose client went away, and (threads) how to tell whether one has, until their stream ends.
        self._cut: set[Any] = set()
        self._probes: dict[Any, Callable[[], bool]] = {}

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @contextlib.contextmanager
    def read(self) -> Iterator[None]:
        """Around one blocking read: `stop` interrupts it with `Interrupted`, as does entering it after a stop, and
        so does `cut` for the reads of one reader."""
        if self.stopping:
            raise Interrupted()
        me = _current_greenlet()
        who = me if me is not None else threading.get_ident()
        probe = self._probes.get(who)
        if who in self._cut or (probe is not None and probe()):
            self._cut.add(who)
            raise Interrupted()
        if me is not None:
            with self._lock:
                self._reading.add(me)
        try:
            yield
        finally:
            if me is not None:
                with self._lock:
                    self._reading.discard(me)

    def cut(self, reader: Any) -> None:
        """`reader`'s client went away: its read in progress ends now (under gevent), and each later one at once."""
        self._cut.add(reader)
        from gevent import get_hub

        def deliver() -> None:
            # Checked when the interruption lands, not when it is scheduled: by then the reader may have left its
            # read (to write to the client), and an exception thrown there would end the request with a traceback.
            with self._lock:
                reading = reader in self._reading
            if reading:
                reader.throw(Interrupted())

        get_hub().loop.run_callback(deliver)

    def watch_with(self, reader: Any, probe: Callable[[], bool]) -> None:
        """Where nothing can interrupt a read (threads), ask `probe` before each of `reader`'s reads whether its
        client went away."""
        self._probes[reader] = probe

    def cut_off(self, reader: Any) -> bool:
        """Whether `reader`'s client went away (under threads: asks its probe now)."""
        probe = self._probes.get(reader)
        if reader in self._cut or (probe is not None and probe()):
            self._cut.add(reader)
            return True
        return False

    def forget(self, reader: Any) -> None:
        """`reader`'s stream ended: what `cut` and `watch_with` kept for it goes."""
        self._cut.discard(reader)
        self._probes.pop(reader, None)

    def stop(self) -> None:
        """Every read in progress ends now, and every later one at once. Runs in its own greenlet: `gevent.kill`
        only schedules each interruption, so none lands while this loop runs."""
        self._stopping.set()
        with self._lock:
            reading = list(self._reading)
        if reading:
            import gevent

            for greenlet in reading:
                gevent.kill(greenlet, Interrupted)


def hung_up(sock: socket.socket) -> bool:
    """Whether the peer of a served connection closed it (it sends nothing more while it reads a stream)."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:  # reset, or the socket is already closed
        return True


class HangUpWatch:
    """While started, ends the reads in `drain` of the greenlet (or thread) that started it as soon as the client
    `sock` hangs up: for a held answer whose response is not a stream (an A2A blocking send), and for each stream.

    Under gevent a greenlet waits for the socket to turn readable (the client closing it; a client waiting for
    its answer sends nothing) and cuts the reader's reads at once; under threads each read asks first."""

    def __init__(self, sock: socket.socket, drain: Drain) -> None:
        self.sock, self.drain = sock, drain
        self._reader: Any = None
        self._watcher: Any = None

    @property
    def hung_up(self) -> bool:
        """Whether the client went away (its reader's reads end at once from then on)."""
        return self._reader is not None and self.drain.cut_off(self._reader)

    def start(self) -> HangUpWatch:
        self._reader = _reader()
        if _current_greenlet() is None:
            self.drain.watch_with(self._reader, lambda: hung_up(self.sock))
            return self
        import gevent

        self._watcher = gevent.spawn(self._watch)
        return self

    def _watch(self) -> None:
        from gevent.socket import wait_read

        try:
            wait_read(self.sock.fileno())
        except (OSError, ValueError):  # the socket was closed under the watcher
            return
        if hung_up(self.sock):
            self.drain.cut(self._reader)
        # Anything else readable is a request sent behind this one: its reads go on, and end by their deadline.

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.kill(block=False)
        if self._reader is not None:
            self.drain.forget(self._reader)

    def __enter__(self) -> HangUpWatch:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


class ClientWatch(Generic[T]):
    """A streamed response's items, whose reads `drain` ends as soon as the client `sock` hangs up (`HangUpWatch`,
    started by the first item, in the greenlet or thread that serves the stream). Whatever the server, `close`
    (called by it when the response ends) ends the watching, then closes `items`."""

    def __init__(self, items: Iterator[T], sock: socket.socket, drain: Drain) -> None:
        self.items = items
        self.watch = HangUpWatch(sock, drain)
        self._started = False

    def __iter__(self) -> ClientWatch[T]:
        return self

    def __next__(self) -> T:
        if not self._started:
            self._started = True
            self.watch.start()
        return next(self.items)

    def close(self) -> None:
        self.watch.stop()
        close = getattr(self.items, "close", None)
        if close is not None:
            close()
