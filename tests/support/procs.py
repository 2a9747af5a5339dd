"""Separate processes for tests where a process boundary is the point: workers to kill, sweepers."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from tasks_backend.config import Settings
from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]


def settings_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment that makes `Settings.from_env()` in a child equal `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKS_BACKEND_", "FLOWER_"))}
    env.update({
        "REDIS_URL": settings.redis_url,
        "CELERY_BROKER_URL": settings.effective_broker_url,
        "TASKS_BACKEND_REDIS_SERVICE": settings.redis_service,
        "TASKS_BACKEND_SUBMIT_REPLICAS": str(settings.submit_replicas),
        "TASKS_BACKEND_SUBMIT_REPLICAS_TIMEOUT": str(settings.submit_replicas_timeout_s),
        "TASKS_BACKEND_KEY_PREFIX": settings.key_prefix,
        "TASKS_BACKEND_QUEUE": settings.queue,
        "TASKS_BACKEND_JOBS": ",".join(settings.job_modules),
        "TASKS_BACKEND_OPERATORS": ",".join(settings.operators),
        "TASKS_BACKEND_LEASE": str(settings.lease_s),
        "TASKS_BACKEND_MAX_ATTEMPTS": str(settings.max_attempts),
        "TASKS_BACKEND_QUEUED_GRACE": str(settings.queued_grace_s),
        "TASKS_BACKEND_SWEEP_INTERVAL": str(settings.sweep_interval_s),
        "TASKS_BACKEND_VISIBILITY_TIMEOUT": str(settings.visibility_timeout_s),
        "TASKS_BACKEND_DELIVERY_LIMIT": str(settings.delivery_limit),
        "LOG_FORMAT": "json",
        # The test jobs live in this checkout, which a console script does not put on sys.path.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    })
    env.update(extra)
    return env


class Proc:
    """A child process in its own process group, stopped (and its children with it) on `stop`.

    `prefix` runs it through another command that execs it (`ip netns exec <name>`: another network)."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, prefix: Sequence[str] = ()) -> None:
        self.log_path = log
        self._log = log.open("ab")
        self.popen = subprocess.Popen([*prefix, *args], env=env, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
                                      start_new_session=True)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill_group(self, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)

    def stop(self, timeout: float = 20) -> None:
        if self.alive():
            self.kill_group(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill_group(signal.SIGKILL)
                self.popen.wait(10)
        self._log.close()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


def worker_process(settings: Settings, log: Path, *, pool: str = "prefork", concurrency: int = 1,
                   prefix: Sequence[str] = (), options: Sequence[str] = (), **env: Any) -> Proc:
    """`tasks-backend worker`; `options` go before Celery's (`--hand-back-on-stop`)."""
    args = [sys.executable, "-m", "tasks_backend.cli", "worker", *options, "--pool", pool, "--concurrency",
            str(concurrency),
            "--without-mingle", "--without-gossip", "--hostname", f"w{os.getpid()}-{log.stem}@%h"]
    return Proc(args, settings_env(settings, **{k: str(v) for k, v in env.items()}), log, prefix)


def sweeper_process(settings: Settings, log: Path, prefix: Sequence[str] = (), **env: str) -> Proc:
    return Proc([sys.executable, "-m", "tasks_backend.cli", "sweeper"], settings_env(settings, **env), log, prefix)


def web_process(settings: Settings, log: Path, bind: str, prefix: Sequence[str] = (), **env: str) -> Proc:
    """`tasks-backend web` (gunicorn, one worker process) on `bind`; tokens come from `env`."""
    args = [sys.executable, "-m", "tasks_backend.cli", "web", "--workers", "1", "--bind", bind]
    return Proc(args, settings_env(settings, **env), log, prefix)


SERVICES = {"gunicorn": "web", "worker": "worker", "sweeper": "sweeper", "flower": "flower", "redis-server": "redis"}


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a live process, None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return fields[0], int(fields[1])


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except (FileNotFoundError, ProcessLookupError):
        return []


def child_pids(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) and stat[1] == pid:
            found.append(int(entry.name))
    return found


def session_pids(sid: int) -> list[int]:
    """The live processes of session `sid`, however they were reparented (a process group of their own, or
    orphaned by a killed parent, keeps the session). Linux only."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def service_pids(launcher: int) -> dict[str, int]:
    """The processes a launcher (`tasks-backend run`, honcho) started, by service name, looking through
    what stands between (honcho's forked manager and the shell it runs each command in). Linux only."""
    out: dict[str, int] = {}
    level = child_pids(launcher)
    for _ in range(4):
        below = []
        for pid in level:
            # Split on spaces too: redis-server rewrites its command line as one "path host:port" string.
            words = {Path(word).name for arg in _cmdline(pid) for word in arg.split()}
            name = next((service for word, service in SERVICES.items() if word in words), None)
            if name:
                out.setdefault(name, pid)
            else:
                below += child_pids(pid)
        level = below
    return out


def wait_for_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float, what: str) -> None:
    """Wait until `url` answers 200, failing at once (with the log's tail) if `proc` exits first."""
    def up() -> bool:
        assert proc.poll() is None, log.read_text(errors="replace")[-4000:]
        try:
            return httpx.get(url, timeout=3).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(up, timeout, interval=0.2, message=what)


def tails(procs: Sequence[Proc]) -> str:
    """The tail of each process's log, for a test that failed."""
    return "\n".join(f"--- {proc.log_path.name}\n{proc.output()[-3000:]}" for proc in procs)


def print_logs(procs: Sequence[Proc]) -> None:
    print(tails(procs))

