"""What `tasks-backend run` makes sure of before it starts anything, each refusal said once with what to change.

- Its data directory is its own (`DataDirLock`): two embedded Redis servers appending to one AOF would each
  lose the other's jobs.
- Its configuration holds: the numbers are numbers and the job modules import (once here, not in every child).
- The Redis and the broker it was pointed at answer (a stale `REDIS_URL` would leave every child waiting).
Rule: heavy imports (Celery, kombu, redis-py) wait until a check needs them, since every `tasks-backend`
command imports this module.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tasks_backend.config import Settings

#: The file in a data directory that the `run` using it holds locked (and says who it is in).
LOCK_NAME = "run.lock"
#: How long a Redis or broker that `run` was pointed at gets to answer (one starting beside it, say).
REACH_S = 5.0


class Refused(Exception):
    """Why `run` starts nothing: its message is said once, then `run` exits non-zero."""


class DataDirLock:
    """`run.lock` in a data directory, locked (`flock`) by the one `run` whose embedded Redis keeps its data
    there. The kernel releases it when that process ends, however it ends; the file says who holds it."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_NAME
        self._fd: int | None = None

    def holder(self) -> dict[str, Any] | None:
        """What the `run` that holds the lock wrote about itself, if one holds it; nothing is made or taken."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return self._read()
        finally:
            os.close(fd)  # and with it the shared lock, if it was granted
        return None

    def take(self) -> dict[str, Any] | None:
        """Hold the lock (making the directory if need be) for as long as this process lives; if another `run`
        holds it, leave it and answer what that one wrote about itself."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited: a child must not keep it held
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return self._read()
        self._fd = fd
        return None

    def describe(self, **about: str | int) -> None:
        """Say who holds the lock (this process, and what it serves on) for a second `run` to name."""
        assert self._fd is not None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps({"pid": os.getpid(), **about}).encode(), 0)

    def _read(self) -> dict[str, Any]:
        with contextlib.suppress(OSError, ValueError):  # the holder may be writing it this very moment
            found = json.loads(self.path.read_text())
            if isinstance(found, dict):
                return found
        return {}


def in_use(data_dir: str, holder: Mapping[str, Any], suggest: Mapping[str, str]) -> str:
    """The refusal of a second `run` on a data directory: who uses it, and how to run another beside it."""
    served = [f"{label} {holder[key]}" for key, label in (("port", "web port"), ("flower_port", "Flower port"),
                                                          ("redis_port", "Redis port")) if holder.get(key)]
    who = f"pid {holder.get('pid', 'unknown')}" + "".join(f", {item}" for item in served)
    ports = " ".join(f"{name}={number}" for name, number in suggest.items())
    return (f"{data_dir} is in use by another tasks-backend run ({who}): its embedded Redis keeps its data "
            "there.\nUse that one (paste the block it printed), stop it (Ctrl-C in its terminal), or run another "
            f"beside it with its own data directory and ports: {ports} {_program()} run --data-dir "
            f"{_another(data_dir)}")


def _another(data_dir: str) -> str:
    """The first `<data_dir>-N` that no `run` holds."""
    n = 2
    while DataDirLock(Path(f"{data_dir}-{n}")).holder() is not None:
        n += 1
    return f"{data_dir}-{n}"


def _program() -> str:
    """This program as the user can type it: the console script of this environment (relative when it is
    under this directory, as `make run`'s `.venv` is), or `tasks-backend` on PATH."""
    script = Path(sys.prefix, "bin", "tasks-backend")
    if sys.prefix == sys.base_prefix or not script.exists():
        return "tasks-backend"
    with contextlib.suppress(ValueError):
        return str(script.relative_to(Path.cwd()))
    return str(script)


# -- configuration -----------------------------------------------------------------------------------
#: Run by this interpreter in `run`'s directory and environment, as the children are (`python -c`, like
#: `python -m`, puts that directory first on sys.path): the job modules import there or the setting is wrong.
#: `run` itself does not import them, so it does not carry what a job imports for as long as it supervises.
_IMPORT_JOBS = """
import sys
from tasks_backend.config import Settings
from tasks_backend.running.registry import JobModuleNotFound, Registry
try:
    Registry.from_modules(Settings.from_env().job_modules)
except (JobModuleNotFound, ValueError) as exc:
    sys.exit(str(exc))
"""


def check_configuration(env: Mapping[str, str]) -> Settings:
    """The settings every child will read from `env`, or `Refused` saying which variable is wrong. A job module
    that fails for another reason (its own code) is refused with its traceback: that one is the user's to read."""
    try:
        settings = Settings.from_env(env)
        settings.effective_broker_url  # noqa: B018 - a Redis Cluster without a broker is refused here
    except ValueError as exc:
        raise Refused(str(exc)) from None
    imported = subprocess.run([sys.executable, "-c", _IMPORT_JOBS], env=dict(env), capture_output=True, text=True,
                              check=False)
    if imported.returncode != 0:
        raise Refused(imported.stderr.strip() or f"importing TASKS_BACKEND_JOBS failed (status "
                                                  f"{imported.returncode})")
    return settings


# -- reachability ------------------------------------------------------------------------------------
def check_reachable(settings: Settings, env: Mapping[str, str], *, store: bool) -> None:
    """`Refused` naming the first server `run` was pointed at that does not answer within `REACH_S`: the
    store (unless `run` starts its own) and a separate broker. Only variables point `run` anywhere, so the
    message names the variable and says it came from the environment; passwords are masked."""
    from tasks_backend.service.runtime import redact_url

    deadline = time.monotonic() + REACH_S
    for what, url, variable, instead in _servers(settings, env, store=store):
        error = _answer(url, settings, deadline)
        if error is not None:
            raise Refused(f"cannot reach {what} at {redact_url(url)} ({variable}, from the environment): {error}\n"
                          f"Start it, or unset {variable} {instead}.")


def _servers(settings: Settings, env: Mapping[str, str], *, store: bool) -> Iterator[tuple[str, str, str, str]]:
    if store:
        variable = "TASKS_BACKEND_REDIS_SENTINELS" if env.get("TASKS_BACKEND_REDIS_SENTINELS") else "REDIS_URL"
        yield "Redis", settings.redis_url, variable, "and run starts a Redis of its own"
    if settings.broker_url and settings.broker_url != settings.redis_url:
        yield "the broker", settings.broker_url, "CELERY_BROKER_URL", "and the Redis is the broker too"


def _answer(url: str, settings: Settings, deadline: float) -> str | None:
    """None once the server at `url` answers; its last error if it has not by `deadline`."""
    while True:
        try:
            _ping(url, settings)
            return None
        except Exception as exc:  # whatever stops a connection (refused, a name, a password) is said
            error = " ".join(str(exc).split()) or type(exc).__name__
        if time.monotonic() >= deadline:
            return error
        time.sleep(0.25)


def _ping(url: str, settings: Settings) -> None:
    from tasks_backend.config import is_cluster_url
    from tasks_backend.running.rabbitmq import is_amqp
    from tasks_backend.store.connect import connect

    if is_amqp(url):
        from kombu import Connection

        with Connection(url, connect_timeout=1.0) as connection:
            connection.connect()
    elif url.startswith(("redis://", "rediss://", "unix://", "sentinel://")) or is_cluster_url(url):
        client = connect(url, 1.0, service=settings.redis_service)
        try:
            client.ping()
        finally:
            client.close()
    # Any other broker (SQS, say) is Celery's to reach: `run` has no client of its own for it.
