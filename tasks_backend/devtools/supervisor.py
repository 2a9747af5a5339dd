"""Keeps `tasks-backend run`'s processes up: a child that exits is started again after a backoff.

The backoff starts at `first_delay_s` and doubles to `max_delay_s` while a child keeps dying soon
after it starts; once it has stayed up for `stable_after_s` its next exit starts the count again.

SIGTERM, SIGINT or SIGHUP stops them in stages, in the order they depend on each other: what serves
(web, sweeper, Flower) first, then the workers (which hand their running jobs back, and still need the
broker and the store to do it), an embedded Redis last. Each stage has its own deadline, after which
what is left of it is killed, so a stop takes a bounded time whatever runs; a second signal kills
what is left at once. Each child stopped is one line of the log.
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
#: The stage of a child added with `stop_last`: after every other.
LAST_STAGE = 1_000


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
    #: Children stop in ascending stages; each stage waits for the one before it.
    stage: int = 0
    #: How long this child may take to stop before it is killed.
    stop_timeout_s: float = 5.0

    def start(self) -> None:
        self.proc = self.spawn()
        self.started_at = time.monotonic()
        self.restart_at = None


@dataclass
class Supervisor:
    first_delay_s: float = 1.0
    max_delay_s: float = 30.0
    stable_after_s: float = 60.0
    stop_timeout_s: float = 5.0
    poll_s: float = 0.2
    children: list[Child] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    #: Set by a second stop signal: what is still running is killed without waiting for it.
    hurry: threading.Event = field(default_factory=threading.Event)

    def add(self, name: str, spawn: Spawn, proc: subprocess.Popen[bytes] | None = None, *,
            stop_last: bool = False, stage: int = 0, stop_timeout_s: float | None = None) -> Child:
        """Supervise `name`; `proc` when it is already running (started and waited for by the caller).
        `stage` orders the stop (lower first); `stop_last` puts it after every other stage, for what the
        others need while they stop (the embedded Redis)."""
        child = Child(name, spawn, delay_s=self.first_delay_s, stage=LAST_STAGE if stop_last else stage,
                      stop_timeout_s=self.stop_timeout_s if stop_timeout_s is None else stop_timeout_s)
        if proc is None:
            child.start()
        else:
            child.proc, child.started_at = proc, time.monotonic()
        self.children.append(child)
        return child

    def install_signal_handlers(self) -> None:
        # SIGHUP: the terminal `run` was started from went away; stopping is all that is left to do.
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, *_: object) -> None:
        if self.stopping.is_set():
            self.hurry.set()
        self.stopping.set()

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
        """Stop every child, stage by stage; each stage's children are asked together and waited for."""
        for stage in sorted({c.stage for c in self.children}):
            self._stop([c for c in self.children if c.stage == stage])

    def _stop(self, children: list[Child]) -> None:
        asked: list[tuple[Child, subprocess.Popen[bytes], float]] = []
        for child in children:
            child.restart_at = None
            if child.proc is not None and child.proc.poll() is None:
                child.proc.send_signal(signal.SIGTERM)
                asked.append((child, child.proc, time.monotonic()))
        while asked:
            now = time.monotonic()
            for entry in list(asked):
                child, proc, asked_at = entry
                if proc.poll() is not None:
                    asked.remove(entry)
                    how = "" if proc.returncode == 0 else f" with {describe(proc.returncode)}"
                    log.info("%s (pid %d) stopped in %.1fs%s", child.name, proc.pid, now - asked_at, how)
                elif self.hurry.is_set() or now - asked_at >= child.stop_timeout_s:
                    asked.remove(entry)
                    proc.kill()
                    proc.wait()
                    log.warning("%s (pid %d) killed: it had not stopped %.1fs after SIGTERM", child.name, proc.pid,
                                now - asked_at)
            if asked:
                self.hurry.wait(0.05)  # short: a second Ctrl-C is seen at once
