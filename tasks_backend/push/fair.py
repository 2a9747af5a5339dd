"""Sharing push delivery fairly between owners: a pool that serves owners in turn, and a breaker per target.

A receiver that accepts the connection and never answers holds a POST for the whole push timeout; an owner
with thousands of configs at such receivers would otherwise fill every POST slot and the queue behind it.
`FairPool` keeps a queue per owner and hands a free thread to the owner served least recently that has work
and is below its cap (half the threads). `Breakers` stops calling a target (scheme, host, port) that keeps
giving no answer: its attempts fail at once for a cool-off, then one attempt at a time probes it.
Rule: one owner's receivers never decide when another owner's notifications go out; the state is each
process's own, on its monotonic clock.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

#: Failures in a row (no HTTP answer) that open a target's breaker.
BREAKER_THRESHOLD = 3
#: The first cool-off of an open target, and the longest one.
BREAKER_BASE_S = 5.0
BREAKER_MAX_S = 60.0
#: Targets remembered at most; the oldest entries are forgotten first (a forgotten target starts closed).
BREAKER_TARGETS = 10_000


class FairPool:
    """Threads serving per-owner queues in turn, at most `per_owner` tasks of one owner at a time."""

    def __init__(self, workers: int, per_owner: int, name: str = "push-delivery") -> None:
        self.per_owner = max(1, per_owner)
        self._queues: collections.OrderedDict[str, collections.deque[Callable[[], None]]] = (
            collections.OrderedDict())
        self._running: collections.Counter[str] = collections.Counter()
        self._ready = threading.Condition()
        self._closed = False
        self._threads = [threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True)
                         for i in range(max(1, workers))]
        for thread in self._threads:
            thread.start()

    def submit(self, owner: str, task: Callable[[], None]) -> None:
        with self._ready:
            if self._closed:
                raise RuntimeError("the pool is shut down")
            self._queues.setdefault(owner, collections.deque()).append(task)
            self._ready.notify()

    def running(self, owner: str) -> int:
        with self._ready:
            return self._running[owner]

    def shutdown(self) -> None:
        """Run what is queued, then stop the threads and wait for them."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()
        for thread in self._threads:
            thread.join()

    def _next(self) -> tuple[str, Callable[[], None]] | None:
        """The oldest task of the owner served least recently that is below its cap (lock held)."""
        for owner, queue in self._queues.items():
            if self._running[owner] < self.per_owner:
                task = queue.popleft()
                if queue:
                    self._queues.move_to_end(owner)  # its turn is over: the others come first
                else:
                    del self._queues[owner]
                self._running[owner] += 1
                return owner, task
        return None

    def _serve(self) -> None:
        while True:
            with self._ready:
                picked = self._next()
                while picked is None:
                    if self._closed and not self._queues:
                        return
                    self._ready.wait()
                    picked = self._next()
            owner, task = picked
            try:
                task()
            finally:
                with self._ready:
                    self._running[owner] -= 1
                    if not self._running[owner]:
                        del self._running[owner]
                    # A slot of this owner is free: a thread waiting for its queue may go on.
                    self._ready.notify_all()


#: What one breaker covers: (owner, scheme, host, port).
Target = tuple[str, str, str, int]


def target_of(owner: str, url: str) -> Target:
    """The breaker of one owner's push URL: the owner, and the scheme, host and port it connects to."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return owner, parts.scheme, (parts.hostname or "").lower(), port or (443 if parts.scheme == "https" else 80)


class _Target:
    __slots__ = ("cooloff_s", "failures", "open_until", "probing")

    def __init__(self) -> None:
        self.failures = 0
        self.open_until = 0.0
        self.cooloff_s = BREAKER_BASE_S
        self.probing = False


class Breakers:
    """A circuit breaker per owner and push target, on this process's monotonic clock.

    A failure is an exchange that got no HTTP answer (a timeout, a refused or reset connection, an answer
    that is not HTTP). After `threshold` in a row the target is open for a cool-off that doubles, up to
    `max_s`, while it stays silent; then one attempt at a time probes it, and any HTTP status closes it.
    Breakers are per owner too: one owner's configs at a hanging path of a shared host must not make
    another owner's attempts at that host fail."""

    def __init__(self, threshold: int = BREAKER_THRESHOLD, base_s: float = BREAKER_BASE_S,
                 max_s: float = BREAKER_MAX_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold = threshold
        self.base_s = base_s
        self.max_s = max_s
        self.clock = clock
        self._targets: dict[Target, _Target] = {}
        self._lock = threading.Lock()

    def allow(self, target: Target) -> bool:
        """Whether an attempt at `target` may go out now; once open, one probe at a time after the cool-off."""
        with self._lock:
            state = self._targets.get(target)
            if state is None or state.failures < self.threshold:
                return True
            if state.probing or self.clock() < state.open_until:
                return False
            state.probing = True
            return True

    def record(self, target: Target, answered: bool | None) -> None:
        """The outcome of an attempt `allow` let out: an HTTP answer (any status), none, or None when the
        attempt ended before reaching the target (it only ends a probe)."""
        with self._lock:
            state = self._targets.get(target)
            if answered:
                self._targets.pop(target, None)
                return
            if answered is None:
                if state is not None:
                    state.probing = False
                return
            if state is None:
                if len(self._targets) >= BREAKER_TARGETS:
                    del self._targets[next(iter(self._targets))]
                state = self._targets[target] = _Target()
            if state.probing:  # the probe failed: open again, for longer
                state.probing = False
                state.cooloff_s = min(self.max_s, state.cooloff_s * 2)
                state.open_until = self.clock() + state.cooloff_s
                return
            state.failures += 1
            if state.failures == self.threshold:
                state.cooloff_s = self.base_s
                state.open_until = self.clock() + state.cooloff_s
            # Beyond the threshold (attempts that were already in flight when it opened) nothing changes.
