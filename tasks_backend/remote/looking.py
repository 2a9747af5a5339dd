"""Looks at remote tasks run side by side, so that a slow remote delays only its own jobs' looks.

`Lookers` runs them on a few daemon threads, one look per job at a time; `HostLimit` lets one remote host hold
at most `PER_HOST` of those threads at once (a look that finds its host at the limit is put off, not queued).
A remote that accepts connections and never answers then costs each process `PER_HOST` threads for
`TASKS_BACKEND_REMOTE_TIMEOUT` at a time, and every other remote is looked at as usual.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from ..errors import ServiceUnavailable
from ..push.fair import target_of

log = logging.getLogger(__name__)
#: Threads that look, per process. Most looks are one short HTTP exchange; a handful lets three slow hosts hold
#: their `PER_HOST` threads each and still leaves two for everyone else, while staying cheap in every worker
#: and sweeper (which all poll).
LOOKERS = 8
#: Looks at one remote host (scheme, name and port) at once, per process.
PER_HOST = 2


def host_of(url: str) -> str:
    """The host a look connects to, as the push breakers name one (an implied port is the scheme's)."""
    _, scheme, host, port = target_of("", url)
    return f"{scheme}://{host}:{port}"


class HostLimit:
    def __init__(self, per_host: int = PER_HOST) -> None:
        self.per_host = per_host
        self._lock = threading.Lock()
        self._busy: Counter[str] = Counter()

    @contextlib.contextmanager
    def hold(self, urls: Iterable[str]) -> Iterator[bool]:
        """Yields True holding a place at each URL's host for the block, or False (holding none) if one of those
        hosts already has `per_host` looks."""
        hosts = {host_of(url) for url in urls}
        with self._lock:
            free = all(self._busy[host] < self.per_host for host in hosts)
            if free:
                self._busy.update(hosts)
        try:
            yield free
        finally:
            if free:
                with self._lock:
                    self._busy.subtract(hosts)
                    for host in hosts:
                        if self._busy[host] <= 0:
                            del self._busy[host]


class Lookers:
    """Runs looks on up to `size` daemon threads (started with the first look). A job whose look is queued or
    running is not taken again (`submit` answers False). `stop` drops the looks not started yet; running ones
    end on their own, and a daemon thread holds no process up while one waits on a silent remote."""

    def __init__(self, size: int = LOOKERS) -> None:
        self.size = size
        self.stopped = threading.Event()
        self._queue: queue.SimpleQueue[tuple[str, Callable[[], object]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._jobs: set[str] = set()
        self._threads: list[threading.Thread] = []

    def submit(self, job_id: str, look: Callable[[], object]) -> bool:
        with self._lock:
            if self.stopped.is_set() or job_id in self._jobs:
                return False
            self._jobs.add(job_id)
            if not self._threads:
                self._threads = [threading.Thread(target=self._run, name=f"remote-look-{i}", daemon=True)
                                 for i in range(self.size)]
                for thread in self._threads:
                    thread.start()
        self._queue.put((job_id, look))
        return True

    def in_flight(self) -> set[str]:
        with self._lock:
            return set(self._jobs)

    def stop(self) -> None:
        with self._lock:
            self.stopped.set()
            for _ in self._threads:
                self._queue.put(None)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None and not self.stopped.is_set():
            job_id, look = item
            try:
                look()
            except ServiceUnavailable as exc:
                log.warning("remote look at job %s skipped: Redis is unreachable (%r)", job_id, exc.__cause__)
            except Exception:
                if not self.stopped.is_set():  # once stopped, its HTTP client may be closed under it
                    log.exception("remote look at job %s failed", job_id)
            finally:
                with self._lock:
                    self._jobs.discard(job_id)
