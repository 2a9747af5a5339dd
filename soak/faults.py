"""The seeded fault schedule and the injectors that carry it out, one fault at a time."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .system import System, faketime_library

KINDS = (
    "pool_child_kill",  # SIGKILL one prefork pool process (Celery's pool replaces it)
    "worker_kill",      # SIGKILL a worker's main process (the supervisor restarts it)
    "worker_term",      # SIGTERM a worker and start it again, as a deploy does
    "redis_restart",    # redis-server stopped (AOF written) and started again on the same port
    "redis_stall",      # redis-server SIGSTOPped for several seconds, then SIGCONTed
    "sweeper_kill",     # SIGKILL the sweeper (the supervisor restarts it)
    "web_kill",         # SIGKILL one gunicorn worker (gunicorn respawns it)
    "proxy_cut",        # every connection to Redis (web, workers, sweeper) cut at once
    "proxy_drop",       # for a few seconds, some of Redis's replies swallowed and their connections cut
    "clock_skew",       # one worker restarted with its clock 60 s off (libfaketime), for a while, then fixed
)


@dataclass
class Fault:
    kind: str
    at_s: float          # planned offset from the start of the drive
    hold_s: float        # how long the fault lasts (0: a single blow)
    target: int          # which worker (1-based) or pool/web process index
    skew_s: int = 0
    started: float = 0.0  # monotonic, when injected
    ended: float = 0.0    # monotonic, when the system was put back (process restarted, Redis back...)
    note: str = ""
    recovery_s: float | None = None
    probe_error: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        bits = [f"t={self.at_s:6.1f}s", f"{self.kind:<15}"]
        if self.hold_s:
            bits.append(f"hold {self.hold_s:.1f}s")
        if self.kind in ("pool_child_kill", "worker_kill", "worker_term", "clock_skew", "web_kill"):
            bits.append(f"target {self.target}")
        if self.skew_s:
            bits.append(f"skew {self.skew_s:+d}s")
        return " ".join(bits)


def schedule(seed: int, *, drive_s: float, per_kind: int, worker_count: int, skew_hold_s: float) -> list[Fault]:
    """`per_kind` faults of every kind, in a seeded order, spread evenly over the drive (after a warm-up).

    Clock faults alternate between a slow clock (-60 s: the harsher, as every lease it writes looks lapsed
    to the others) and a fast one (+60 s), the slow one first, so a quick run gets the slow one."""
    rng = random.Random(f"faults:{seed}")
    kinds = [k for k in KINDS for _ in range(per_kind)]
    rng.shuffle(kinds)
    start, end = min(5.0, drive_s * 0.05), drive_s * 0.92
    slot = (end - start) / len(kinds)
    faults = []
    skews = 0
    for i, kind in enumerate(kinds):
        hold = {"redis_restart": rng.uniform(1.0, 3.0), "redis_stall": rng.uniform(4.0, 7.0),
                "proxy_drop": rng.uniform(2.0, 4.0), "clock_skew": skew_hold_s}.get(kind, 0.0)
        faults.append(Fault(kind, round(start + i * slot + rng.uniform(0, slot * 0.3), 1), round(hold, 1),
                            rng.randint(1, worker_count),
                            skew_s=(60 if skews % 2 else -60) if kind == "clock_skew" else 0))
        skews += kind == "clock_skew"
    return faults


class Injector:
    """Runs the schedule in one long-lived thread (the embedded Redis it restarts belongs to that thread)."""

    def __init__(self, system: System, faults: list[Fault], t0: float,
                 after_fault: Callable[[Fault], None]) -> None:
        self.system, self.faults, self.t0 = system, faults, t0
        self.after_fault = after_fault
        self.done = threading.Event()
        self.finish = threading.Event()  # set at teardown: the thread may end (and its Redis with it)
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, name="soak-faults", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        try:
            for fault in self.faults:
                wait = self.t0 + fault.at_s - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                fault.started = time.monotonic()
                try:
                    fault.note = getattr(self, fault.kind)(fault) or ""
                except Exception as exc:  # a fault that could not be injected is reported, never hidden
                    fault.note = f"injection failed: {exc!r}"
                    self.errors.append(f"{fault.describe()}: {exc!r}")
                fault.ended = time.monotonic()
                self.after_fault(fault)
        finally:
            self.done.set()
        self.finish.wait()

    # -- the faults ---------------------------------------------------------------------------
    def _worker(self, fault: Fault) -> str:
        return f"worker{fault.target}"

    def pool_child_kill(self, fault: Fault) -> str:
        name = self._worker(fault)
        deadline = time.monotonic() + 30  # a worker restarted by the fault before may still be forking its pool
        while not (pool := self.system.pool_children(name)) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not pool:
            return f"{name} has no pool processes to kill"
        pid = pool[fault.target % len(pool)]
        os.kill(pid, signal.SIGKILL)
        return f"killed pool process {pid} of {name}"

    def worker_kill(self, fault: Fault) -> str:
        name = self._worker(fault)
        child = self.system.children[name]
        if not child.alive():
            return f"{name} was not running"
        os.kill(child.pid, signal.SIGKILL)
        return f"killed {name} (pid {child.pid})"

    def worker_term(self, fault: Fault) -> str:
        name = self._worker(fault)
        code = self.system.restart(name)
        return f"{name} stopped with {code} and started again"

    def redis_restart(self, fault: Fault) -> str:
        self.system.redis.stop()
        time.sleep(fault.hold_s)
        self.system.redis.start(timeout_s=60)
        return "redis-server restarted from its AOF"

    def redis_stall(self, fault: Fault) -> str:
        assert self.system.redis.process is not None
        pid = self.system.redis.process.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(fault.hold_s)
        finally:
            os.kill(pid, signal.SIGCONT)
        return f"redis-server stalled for {fault.hold_s:.1f}s"

    def sweeper_kill(self, fault: Fault) -> str:
        child = self.system.children["sweeper"]
        if not child.alive():
            return "the sweeper was not running"
        os.kill(child.pid, signal.SIGKILL)
        return f"killed the sweeper (pid {child.pid})"

    def web_kill(self, fault: Fault) -> str:
        pool = self.system.pool_children("web")
        if not pool:
            return "no gunicorn worker to kill"
        pid = pool[fault.target % len(pool)]
        os.kill(pid, signal.SIGKILL)
        return f"killed gunicorn worker {pid}"

    def proxy_cut(self, fault: Fault) -> str:
        assert self.system.proxy is not None
        return f"cut {self.system.proxy.cut()} connections"

    def proxy_drop(self, fault: Fault) -> str:
        assert self.system.proxy is not None
        before = self.system.proxy.dropped_replies
        self.system.proxy.drop_replies(fault.hold_s)
        return f"swallowed {self.system.proxy.dropped_replies - before} replies (and cut their connections)"

    def clock_skew(self, fault: Fault) -> str:
        library = faketime_library()
        if library is None:
            raise RuntimeError("libfaketime is not installed (apt-get install libfaketime)")
        name = self._worker(fault)
        self.system.restart(name, {"LD_PRELOAD": library, "FAKETIME": f"{fault.skew_s:+d}s",
                                   "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
        time.sleep(fault.hold_s)
        self.system.restart(name)
        return f"{name} ran {fault.skew_s:+d}s off for {fault.hold_s:.0f}s"
