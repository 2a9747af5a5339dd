"""Ending held streams and blocking waits when a web process is asked to stop.

A deploy stops a web process with SIGTERM, and its server then waits, up to the graceful timeout, for the
requests in flight. Event streams, subscriptions and blocking sends stay in flight for minutes, each blocked in
Redis for the job's next change: left alone they would hold every stopping process for its whole graceful timeout
(30 s) and then be cut off mid-stream. `Drain.stop` ends each of them as its own deadline would: a stream closes
cleanly (its client reconnects, with Last-Event-ID, to a process still serving) and a blocking send answers with
the task as it stands.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any


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


class Drain:
    """One per process, shared by every service that reads held streams."""

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._reading: set[Any] = set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @contextlib.contextmanager
    def read(self) -> Iterator[None]:
        """Around one blocking read: `stop` interrupts it with `Interrupted`, as does entering it after a stop."""
        if self.stopping:
            raise Interrupted()
        me = _current_greenlet()
        if me is not None:
            with self._lock:
                self._reading.add(me)
        try:
            yield
        finally:
            if me is not None:
                with self._lock:
                    self._reading.discard(me)

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
