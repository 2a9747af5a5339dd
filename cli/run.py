"""`tasks-backend run` (what `make run` calls): the whole system on this machine, supervised.

It checks its ports before starting anything, starts an embedded Redis unless `REDIS_URL` is set, then the
web app, a worker, the sweeper and Flower; once every one of them answers it prints one "ready" line and a
block to paste into another terminal (activate the environment, export `TASKS_BACKEND_URL`,
`TASKS_BACKEND_TOKEN` and `REDIS_URL`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import httpx

from tasks_backend.config import Settings
from tasks_backend.embedded import EmbeddedRedis, die_with_parent, free_port
from tasks_backend.supervisor import Supervisor

#: How often the readiness probes run while the children start.
PROBE_INTERVAL_S = 0.25
#: What an application in another terminal needs to reach this same system (`connect_service()` reads them):
#: where Redis is, where job messages go, and which keys, queue and operations are this system's.
CONNECTION_VARIABLES = ("REDIS_URL", "TASKS_BACKEND_REDIS_SENTINELS", "TASKS_BACKEND_REDIS_SERVICE",
                        "CELERY_BROKER_URL", "TASKS_BACKEND_KEY_PREFIX", "TASKS_BACKEND_QUEUE", "TASKS_BACKEND_JOBS")
#: After this long without every child answering, say which ones are still missing (and keep waiting).
SLOW_START_S = 60.0
#: How a stop goes (Ctrl-C): what serves first, then the worker (it hands its running jobs back through the
#: broker and the store), the embedded Redis last; each stage killed after its time, about 10 s in all.
STOP_STAGES = {"web": (0, 5.0), "sweeper": (0, 5.0), "flower": (0, 5.0), "worker": (1, 5.0)}
REDIS_STOP_S = 3.0


def python_argv(*args: str) -> list[str]:
    """This program, run by this interpreter (so a child uses the same environment)."""
    return [sys.executable, "-m", "cli", *args]


@click.command()
@click.option("--data-dir", default=".tasks-backend", show_default=True, help="where the embedded Redis keeps its AOF")
def run(data_dir: str) -> None:
    """Start everything on this machine: Redis (embedded unless REDIS_URL or Sentinels are set), web, worker,
    sweeper, Flower."""
    env = dict(os.environ)
    env["TASKS_BACKEND_DEV"] = "1"
    port = env.setdefault("PORT", "8000")
    flower_port = env.setdefault("FLOWER_PORT", "5555")
    taken = ports_in_use({"PORT": port, "FLOWER_PORT": flower_port})
    if taken:
        # Before any token is made or any child started: a server that cannot bind would never come up.
        for name, number in taken:
            click.echo(f"port {number} is in use; set {name}=<a free port> (for example {name}={free_port()})",
                       err=True)
        sys.exit(1)
    redis_server: EmbeddedRedis | None = None
    if not env.get("REDIS_URL") and not env.get("TASKS_BACKEND_REDIS_SENTINELS"):
        path = Path(data_dir, "redis")
        path.mkdir(parents=True, exist_ok=True)
        redis_server = EmbeddedRedis(port=free_port(), data_dir=str(path.resolve())).start()
        env["REDIS_URL"] = redis_server.url
    # The token the pasted block exports: one made for this run, else the first static token configured.
    token = _first_token(env.get("TASKS_BACKEND_TOKENS", ""))
    if not (env.get("TASKS_BACKEND_TOKENS") or env.get("TASKS_BACKEND_TOKENS_FILE")
            or env.get("TASKS_BACKEND_JWT_SECRET") or env.get("TASKS_BACKEND_JWT_PUBLIC_KEY")):
        token = secrets.token_urlsafe(24)
        env["TASKS_BACKEND_TOKENS"] = f"dev:{token}"
    env.setdefault("FLOWER_BASIC_AUTH", f"admin:{secrets.token_urlsafe(12)}")

    supervisor = Supervisor()
    supervisor.install_signal_handlers()
    if redis_server is not None:
        assert redis_server.process is not None
        supervisor.add("redis", redis_server.spawn, redis_server.process, stop_last=True,
                       stop_timeout_s=REDIS_STOP_S)
    commands = {
        "web": python_argv("web", "--bind", f"127.0.0.1:{port}"),
        # A Ctrl-C should not wait for what runs: the worker hands its jobs back, to resume on the next start.
        "worker": python_argv("worker", "--hand-back-on-stop", "--concurrency", "2"),
        "sweeper": python_argv("sweeper"),
        "flower": python_argv("flower", "--address=127.0.0.1"),
    }
    for name, argv in commands.items():
        stage, stop_timeout_s = STOP_STAGES[name]
        supervisor.add(name, functools.partial(_spawn, argv, env), stage=stage, stop_timeout_s=stop_timeout_s)
    settings = Settings.from_env(env)
    banner = Banner(port=port, flower_port=flower_port, token=token, flower_auth=env["FLOWER_BASIC_AUTH"],
                    redis_url=settings.redis_url, embedded=redis_server is not None, exports=connection_exports(env))
    probes = readiness_probes(settings, port, flower_port, supervisor)
    threading.Thread(target=_announce_when_ready, args=(probes, banner, supervisor.stopping), daemon=True,
                     name="readiness").start()
    supervisor.run()


def connection_exports(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The connection variables this run was given (or made: an embedded Redis's URL), as the pasted block
    exports them. With Sentinels, REDIS_URL is left out: the Sentinels replace it (`Settings.from_env`)."""
    skip = {"REDIS_URL"} if env.get("TASKS_BACKEND_REDIS_SENTINELS") else set()
    return tuple((name, env[name]) for name in CONNECTION_VARIABLES if env.get(name) and name not in skip)


def _first_token(tokens: str) -> str | None:
    """The token of the first `principal:token` pair of TASKS_BACKEND_TOKENS, if any."""
    first = tokens.split(",", 1)[0].strip()
    return first.partition(":")[2].strip() or None


def ports_in_use(ports: Mapping[str, str]) -> list[tuple[str, str]]:
    """The (variable, port) pairs that something on this machine already listens on."""
    taken = []
    for name, number in ports.items():
        with socket.socket() as probe:
            # As the servers will bind: SO_REUSEADDR, so a port in TIME_WAIT counts as free and a listener does not.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", int(number)))
            except OSError:
                taken.append((name, number))
    return taken


def _spawn(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    # Each child in a process group of its own: the terminal's Ctrl-C (or hang-up) reaches `run` alone, which
    # stops the children in order, rather than every process at once (Redis first among them).
    # A `run` that is killed outright takes them with it (Linux) whatever they are doing: a worker waiting on
    # a job or on an unreachable Redis would not end on SIGTERM (its pool processes die with it in turn).
    return subprocess.Popen(argv, env=env, process_group=0,
                            preexec_fn=functools.partial(die_with_parent, signal.SIGKILL))


# -- readiness ---------------------------------------------------------------------------------------
Probe = Callable[[], bool]


def readiness_probes(settings: Settings, port: str, flower_port: str,
                     supervisor: Supervisor) -> dict[str, Probe]:
    """One check per child, each true once that child serves: the web app's `/readyz` (Redis and broker
    reachable), a Celery ping the worker answers, Flower's `/healthcheck`, the sweeper's process alive."""

    def web() -> bool:
        return _answers(f"http://127.0.0.1:{port}/readyz")

    def flower() -> bool:
        return _answers(f"http://127.0.0.1:{flower_port}/healthcheck")

    celery: list[Any] = []  # one app (and broker connection pool) for every ping, made at the first

    def worker() -> bool:
        from workers.celery_app import create_celery

        with contextlib.suppress(Exception):  # the broker may not be up yet either
            if not celery:
                celery.append(create_celery(settings, consumer=False))
            return bool(celery[0].control.ping(timeout=1.0))
        return False

    def sweeper() -> bool:
        child = next(c for c in supervisor.children if c.name == "sweeper")
        return child.proc is not None and child.proc.poll() is None

    return {"web": web, "worker": worker, "sweeper": sweeper, "flower": flower}


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def _announce_when_ready(probes: dict[str, Probe], banner: Banner, stopping: threading.Event) -> None:
    started = time.monotonic()
    waiting = dict(probes)
    warned = False
    while waiting and not stopping.is_set():
        for name, probe in list(waiting.items()):
            if probe():
                del waiting[name]
        if waiting and not warned and time.monotonic() - started > SLOW_START_S:
            warned = True
            click.echo(f"still waiting for {', '.join(waiting)} to answer…", err=True)
        stopping.wait(PROBE_INTERVAL_S if waiting else 0)
    if not stopping.is_set():
        click.echo(banner.render(time.monotonic() - started))


@dataclass(frozen=True)
class Banner:
    port: str
    flower_port: str
    token: str | None
    flower_auth: str
    redis_url: str
    embedded: bool
    exports: tuple[tuple[str, str], ...] = ()

    def render(self, elapsed_s: float) -> str:
        url = f"http://127.0.0.1:{self.port}"
        user, _, password = self.flower_auth.partition(":")
        lines = [
            "",
            f"tasks-backend is ready on {url} (web, worker, sweeper and Flower answered in {elapsed_s:.1f}s)",
            f"  Redis:    {self.redis_url}" + ("  (embedded)" if self.embedded else ""),
            f"  Web page: {url}/ui",
            f"  Flower:   http://127.0.0.1:{self.flower_port}  (user {user}, password {password})",
            "  Stop everything with Ctrl-C.",
            "",
            "In another terminal, in this directory, paste:",
            "",
        ]
        activate = _activate_script()
        if activate:
            lines.append(f"  source {shlex.quote(activate)}")
        lines.append(_export("TASKS_BACKEND_URL", url))
        if self.token:
            lines.append(_export("TASKS_BACKEND_TOKEN", self.token))
        else:  # tokens from a file or JWTs: only their owner has one to paste
            lines.append("  # export TASKS_BACKEND_TOKEN=<a token of yours>")
        lines += [*(_export(name, value) for name, value in self.exports), ""]
        return "\n".join(lines)


def _export(name: str, value: str) -> str:
    # Quoted for the shell it is pasted into: a Sentinel URL holds `;`, a password may hold anything.
    return f"  export {name}={shlex.quote(value)}"


def _activate_script() -> str | None:
    """The environment this program runs in, as a path to paste (relative when it is under this directory)."""
    if sys.prefix == sys.base_prefix:
        return None
    script = Path(sys.prefix, "bin", "activate")
    with contextlib.suppress(ValueError):
        return str(script.relative_to(Path.cwd()))
    return str(script)
