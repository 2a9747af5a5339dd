"""The system as deployed: redis-server with AOF, gunicorn web, two prefork workers (separate processes,
so they can be killed), the sweeper; and a supervisor that restarts what fails, as systemd would.

The supervisor's policy is `on-failure` by default (systemd's `Restart=on-failure`): a process killed by a
signal or exiting non-zero is restarted after a short backoff; one that exits 0 on its own is left down and
reported ("stayed down"), since a production supervisor with that policy would leave it down too.
`always` restarts every exit, to look past that defect at the others.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tasks_backend.devtools.embedded import EmbeddedRedis, free_port
from tasks_backend.running.rabbitmq import delete_queue

from .proxy import Proxy

ROOT = Path(__file__).resolve().parents[1]
RESTART_BACKOFF_S = 1.0


def children_of(pid: int) -> list[int]:
    """Direct children of `pid`, from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry))
    return sorted(out)


def faketime_library() -> str | None:
    """Where Debian's libfaketime put `libfaketime.so.1` (None if it is not installed)."""
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        listing = subprocess.run(["dpkg", "-L", "libfaketime"], capture_output=True, text=True, check=True).stdout
        for line in listing.splitlines():
            if line.endswith("/libfaketime.so.1"):
                return line
    return None


def _console(name: str) -> list[str]:
    script = Path(sys.executable).parent / name
    return [str(script)] if script.exists() else [sys.executable, "-m", "tasks_backend.cli"]


@dataclass
class Event:
    at: float  # monotonic
    process: str
    what: str


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    #: Set while a fault or a deploy restarts the process on purpose: the supervisor keeps off.
    held: bool = False
    down: bool = False  # exited 0 and left down by the `on-failure` policy
    starts: int = 0
    extra_env: dict[str, str] = field(default_factory=dict)

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.popen = subprocess.Popen(self.argv, env={**self.env, **self.extra_env}, cwd=ROOT, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True)
        self.starts += 1
        self.down = False

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal_group(self, sig: int) -> None:
        if self.popen is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, sig)

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM and wait (then SIGKILL the group); returns the exit status."""
        if self.popen is None:
            return None
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.signal_group(signal.SIGKILL)
                self.popen.wait(10)
        self.signal_group(signal.SIGKILL)  # what a cgroup-based supervisor does with leftovers
        return self.popen.returncode


class System:
    def __init__(self, run_dir: Path, *, env: dict[str, str], supervise: str = "on-failure",
                 web_workers: int = 2, worker_count: int = 2, concurrency: int = 2,
                 broker_url: str | None = None) -> None:
        self.run_dir = run_dir
        #: RabbitMQ (`amqp://…`), reached directly: the proxy's faults are the store's. None: the store's Redis.
        self.broker_url = broker_url
        # A queue of the run's own on a broker that outlives the run (deleted in `close`).
        self.queue = f"{env['TASKS_BACKEND_QUEUE']}-{os.getpid()}" if broker_url else env["TASKS_BACKEND_QUEUE"]
        self.policy = supervise
        self.concurrency = concurrency
        self.web_workers = web_workers
        self.redis = EmbeddedRedis(port=free_port(), data_dir=str(run_dir / "redis"))
        Path(self.redis.data_dir).mkdir(parents=True, exist_ok=True)
        self.proxy: Proxy | None = None
        self.web_port = free_port()
        self.base_env = env
        self.children: dict[str, Child] = {}
        self.events: list[Event] = []
        self.worker_count = worker_count
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.on_event: Callable[[Event], None] = lambda e: None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def workers(self) -> list[Child]:
        return [c for n, c in self.children.items() if n.startswith("worker")]

    def start(self) -> None:
        self.redis.start()
        self.proxy = Proxy(self.redis.port)
        # Every process reaches Redis through the proxy (the harness alone goes direct, to observe).
        proxied = {**self.base_env, "REDIS_URL": self.proxy.url, "CELERY_BROKER_URL": self.broker_url or self.proxy.url,
                   "TASKS_BACKEND_QUEUE": self.queue}
        logs = self.run_dir
        self.children["web"] = Child("web", [*_console("tasks-backend"), "web", "--workers", str(self.web_workers),
                                             "--threads", "4", "--bind", f"127.0.0.1:{self.web_port}"],
                                     proxied, logs / "web.log")
        for i in range(1, self.worker_count + 1):
            self.children[f"worker{i}"] = Child(
                f"worker{i}", [*_console("tasks-backend"), "worker", "--concurrency", str(self.concurrency),
                               "--hostname", f"soak-w{i}@%h"], proxied, logs / f"worker{i}.log")
        self.children["sweeper"] = Child("sweeper", [*_console("tasks-backend"), "sweeper"], proxied,
                                         logs / "sweeper.log")
        for child in self.children.values():
            child.start()
        threading.Thread(target=self._supervise, name="soak-supervisor", daemon=True).start()

    def note(self, process: str, what: str) -> None:
        event = Event(time.monotonic(), process, what)
        with self._lock:
            self.events.append(event)
        self.on_event(event)

    def _supervise(self) -> None:
        while not self._stop.wait(0.2):
            for child in list(self.children.values()):
                if child.held or child.down or child.popen is None or child.popen.poll() is None:
                    continue
                code = child.popen.returncode
                if code == 0 and self.policy == "on-failure":
                    child.down = True
                    self.note(child.name, "exited 0 on its own: left down (Restart=on-failure)")
                    continue
                self.note(child.name, f"exited with {code}: restarting")
                child.signal_group(signal.SIGKILL)
                time.sleep(RESTART_BACKOFF_S)
                if not child.held and not self._stop.is_set():
                    child.start()

    def restart(self, name: str, extra_env: dict[str, str] | None = None) -> int | None:
        """A deploy's restart: SIGTERM, wait for a clean exit, start again (with `extra_env`)."""
        child = self.children[name]
        child.held = True
        try:
            code = child.stop()
            child.extra_env = dict(extra_env or {})
            child.start()
            return code
        finally:
            child.held = False

    def pool_children(self, name: str) -> list[int]:
        child = self.children[name]
        return children_of(child.pid) if child.alive() else []

    def processes_down(self) -> list[str]:
        """What should be running and is not: a child process, a gunicorn worker, a pool process."""
        out = [name for name, child in self.children.items() if not child.alive()]
        if self.children["web"].alive() and len(self.pool_children("web")) < self.web_workers:
            out.append(f"web: {len(self.pool_children('web'))} of {self.web_workers} gunicorn workers")
        for child in self.workers():
            if child.alive() and len(self.pool_children(child.name)) < self.concurrency:
                out.append(f"{child.name}: {len(self.pool_children(child.name))} of {self.concurrency} pool processes")
        if self.redis.process is None or self.redis.process.poll() is not None:
            out.append("redis")
        return out

    def close(self) -> None:
        self._stop.set()
        if self.redis.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.redis.process.pid, signal.SIGCONT)
        for child in self.children.values():
            child.held = True
        for child in self.children.values():
            child.stop(timeout_s=10)
        if self.proxy is not None:
            self.proxy.close()
        self.redis.stop()
        if self.broker_url:
            delete_queue(self.broker_url, self.queue)
