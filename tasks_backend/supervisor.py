"""Keeps `tasks-backend run`'s processes up: a child that exits is started again after a backoff.

The backoff starts at `first_delay_s` and doubles to `max_delay_s` while a child keeps dying soon
after it starts; once it has stayed up for `stable_after_s` its next exit starts the count again.
SIGTERM or SIGINT stops them all, an embedded Redis last, so that the others can still write what
they hold on their way out.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

Spawn = Callable[[], "subprocess.Popen[bytes]"]


def describe(returncode: int) -> str:
    """'status 1' or 'signal SIGKILL', as `Popen.returncode` encodes them."""
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"status {returncode}"


@dataclass
class Child:
    name: str
    spawn: Spawn
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restart_at: float | None = None
    delay_s: float = 0.0
    restarts: int = 0
    stop_last: bool = False

    def start(self) -> None:
        self.proc = self.spawn()
        self.started_at = time.monotonic()
        self.restart_at = None


@dataclass
class Supervisor:
    first_delay_s: float = 1.0
    max_delay_s: float = 30.0
    stable_after_s: float = 60.0
    stop_timeout_s: float = 30.0
    poll_s: float = 0.2
    children: list[Child] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def add(self, name: str, spawn: Spawn, proc: subprocess.Popen[bytes] | None = None, *,
            stop_last: bool = False) -> Child:
        """Supervise `name`; `proc` when it is already running (started and waited for by the caller);
        `stop_last` for what the others need while they stop (the embedded Redis)."""
        child = Child(name, spawn, delay_s=self.first_delay_s, stop_last=stop_last)
        if proc is None:
            child.start()
        else:
            child.proc, child.started_at = proc, time.monotonic()
        self.children.append(child)
        return child

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stopping.set())

    def run(self) -> None:
        """Watch the children until asked to stop, then stop them all."""
        while not self.stopping.is_set():
            self.check()
            self.stopping.wait(self.poll_s)
        self.stop_all()

    def check(self) -> None:
        now = time.monotonic()
        for child in self.children:
            if child.restart_at is not None:
                if now >= child.restart_at:
                    child.restarts += 1
                    child.start()
                    log.warning("%s restarted (pid %s, restart %d)", child.name,
                                child.proc.pid if child.proc else "?", child.restarts)
                continue
            if child.proc is None or child.proc.poll() is None:
                continue
            if now - child.started_at >= self.stable_after_s:
                child.delay_s = self.first_delay_s  # it had stayed up: this is a new failure, not a loop
            child.restart_at = now + child.delay_s
            log.warning("%s (pid %d) exited with %s after %.1fs; restarting it in %gs", child.name,
                        child.proc.pid, describe(child.proc.returncode), now - child.started_at, child.delay_s)
            child.delay_s = min(child.delay_s * 2, self.max_delay_s)

    def stop_all(self) -> None:
        for last in (False, True):
            self._stop([c.proc for c in reversed(self.children)
                        if c.stop_last is last and c.proc is not None and c.proc.poll() is None])

    def _stop(self, procs: list[subprocess.Popen[bytes]]) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
