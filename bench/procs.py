"""Starting and stopping the processes under test: Redis, gunicorn, Celery workers.

Every process is our own child in its own session, stopped by its own id (SIGTERM, then SIGKILL of
its group after a grace period), and logs to a file under the run's directory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]

    def stop(self, grace_s: float = 20.0) -> None:
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)
        # Prefork children that outlived their parent go with its group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)


def start(name: str, argv: Sequence[str], env: dict[str, str], logs: Path, cwd: Path = ROOT) -> Proc:
    """`cwd`: the checkout the process runs in (another revision's, in `bench.revisions`)."""
    log = (logs / f"{name}.log").open("ab")
    popen = subprocess.Popen(list(argv), env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    return Proc(name, popen)


def wait_http(proc: Proc, url: str, timeout_s: float = 60.0) -> None:
    """Wait until `url` answers at all (any status): the server is accepting requests."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited with {proc.popen.returncode}; see its log")
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{proc.name} did not answer {url} within {timeout_s}s") from None
            time.sleep(0.1)


#: Exactly what `tasks-backend web --threads 1` passes to gunicorn, so the baselines run under the same settings.
GUNICORN_FLAGS = ("--worker-class", "sync", "--timeout", "60", "--graceful-timeout", "30", "--access-logfile", "-")


def gunicorn(python: str, app: str, port: int, workers: int, *, worker_class: str | None = None) -> list[str]:
    flags = list(GUNICORN_FLAGS)
    if worker_class:
        flags[1] = worker_class
    return [python, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}", "--workers", str(workers), *flags, app]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The direct children of a process (a Celery worker's pool processes)."""
    with contextlib.suppress(OSError):
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def tree_cpu_seconds(pid: int) -> float:
    """CPU time used so far by a process and every descendant still alive (a gunicorn master and its workers)."""
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        with contextlib.suppress(OSError):
            total += cpu_seconds(current)
        todo += children(current)
    return total


def worker_cpu(main: int, redis_pid: int) -> dict[str, float]:
    """CPU seconds used so far by a Celery worker's main process, its pool processes and the Redis server."""
    return {"worker": cpu_seconds(main), "pool": sum(cpu_seconds(child) for child in children(main)),
            "redis": cpu_seconds(redis_pid)}


def command_calls(client: Any) -> dict[str, int]:
    """Commands a Redis server has served since its start or last CONFIG RESETSTAT, by command (a script and each
    call in it counted), leaving out the bench's own INFO and CONFIG."""
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in client.info("commandstats").items()
            if name not in ("cmdstat_config", "cmdstat_info")}


def script_usec(client: Any) -> float:
    """Microseconds Redis spent running scripts since its start or last CONFIG RESETSTAT, by its own clock (a
    script's whole call, its commands included; wall time, so a script preempted by the kernel counts its wait)."""
    stats = client.info("commandstats")
    return float(sum(stats.get(f"cmdstat_{name}", {}).get("usec", 0) for name in ("eval", "evalsha")))
