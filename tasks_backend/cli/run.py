"""`tasks-backend run` (what `make run` calls): the whole system on this machine, supervised.

Before starting anything it checks its ports, its data directory, its configuration and the servers it was
pointed at (see `preflight`); then it starts an embedded Redis unless `REDIS_URL` is set, the web app, a worker,
the sweeper and Flower; once every one of them answers it prints one "ready" line and a block to paste into
another terminal (activate the environment, export `TASKS_BACKEND_URL`, `TASKS_BACKEND_TOKEN` and `REDIS_URL`).
What the user configured is never printed (a CI log or a journal keeps whatever `run` prints): the block prints
what `run` made, and refers to the user's own variables for the rest.
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
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import click
import httpx

from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import EmbeddedRedis, free_port
from tasks_backend.devtools.supervisor import Supervisor
from tasks_backend.serving.processes import die_with_parent

from .preflight import DataDirLock, Refused, check_configuration, check_reachable, in_use

#: How often the readiness probes run while the children start.
PROBE_INTERVAL_S = 0.25
#: What an application in another terminal needs to reach this same system (`connect_service()` reads them):
#: where Redis is, where job messages go, and which keys and queue are this system's. Not the job modules: an
#: application checks its submits against the operations the workers published, and may not import the modules
#: the server imports from its own folder.
CONNECTION_VARIABLES = ("REDIS_URL", "TASKS_BACKEND_REDIS_SENTINELS", "TASKS_BACKEND_REDIS_SERVICE",
                        "CELERY_BROKER_URL", "TASKS_BACKEND_KEY_PREFIX", "TASKS_BACKEND_QUEUE")
#: After this long without every child answering, say which ones are still missing (and keep waiting).
SLOW_START_S = 60.0
#: How a stop goes (Ctrl-C): what serves first, then the worker (it hands its running jobs back through the
#: broker and the store), the embedded Redis last; each stage killed after its time, about 10 s in all.
STOP_STAGES = {"web": (0, 5.0), "sweeper": (0, 5.0), "flower": (0, 5.0), "worker": (1, 5.0)}
REDIS_STOP_S = 3.0


def python_argv(*args: str) -> list[str]:
    """This program, run by this interpreter (so a child uses the same environment)."""
    return [sys.executable, "-m", "tasks_backend.cli", *args]


@click.command()
@click.option("--data-dir", default=".tasks-backend", show_default=True, help="where the embedded Redis keeps its AOF")
def run(data_dir: str) -> None:
    """Start everything on this machine: Redis (embedded unless REDIS_URL or Sentinels are set), web, worker,
    sweeper, Flower."""
    env = dict(os.environ)
    env["TASKS_BACKEND_DEV"] = "1"
    # Job modules are imported from the folder `run` was started in (`-m` puts it first on the path); named
    # here too, since a worker restarted by SIGHUP runs again by its file's path, which puts that file's folder
    # first instead.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (os.getcwd(), env.get("PYTHONPATH"))))
    port = env.setdefault("PORT", "8000")
    flower_port = env.setdefault("FLOWER_PORT", "5555")
    embedded = not env.get("REDIS_URL") and not env.get("TASKS_BACKEND_REDIS_SENTINELS")
    lock = DataDirLock(Path(data_dir)) if embedded else None
    # A run already on this data directory is named first: its ports are likely the ones taken.
    held = lock.holder() if lock is not None else None
    if held is not None:
        _refuse(in_use(data_dir, held, _ports_to_suggest(port, flower_port)))
    taken = ports_in_use({"PORT": port, "FLOWER_PORT": flower_port})
    if taken:
        # Before any token is made or any child started: a server that cannot bind would never come up.
        for name, number in taken:
            click.echo(f"port {number} is in use; set {name}=<a free port> (for example {name}={free_port()})",
                       err=True)
        sys.exit(1)
    try:
        # Once, here: a child that found it would only be started again and again.
        check_reachable(check_configuration(env), env, store=not embedded)
    except Refused as refusal:
        _refuse(str(refusal))
    redis_server: EmbeddedRedis | None = None
    if lock is not None:
        held = lock.take()
        if held is not None:  # another run took it since the look above
            _refuse(in_use(data_dir, held, _ports_to_suggest(port, flower_port)))
        lock.describe(port=port, flower_port=flower_port)
        path = Path(data_dir, "redis")
        path.mkdir(parents=True, exist_ok=True)
        redis_server = EmbeddedRedis(port=free_port(), data_dir=str(path.resolve())).start()
        env["REDIS_URL"] = redis_server.url
        lock.describe(port=port, flower_port=flower_port, redis_port=redis_server.port)
    # What the banner prints is what this run made: a development token, Flower's password, the embedded Redis's
    # URL. What the user gave (tokens, passwords, URLs) it never prints: it says where that came from instead.
    token: str | None = None
    token_hint = "one of your TASKS_BACKEND_TOKENS" if env.get("TASKS_BACKEND_TOKENS") else "a token of yours"
    if not (env.get("TASKS_BACKEND_TOKENS") or env.get("TASKS_BACKEND_TOKENS_FILE")
            or env.get("TASKS_BACKEND_JWT_SECRET") or env.get("TASKS_BACKEND_JWT_PUBLIC_KEY")):
        token = secrets.token_urlsafe(24)
        env["TASKS_BACKEND_TOKENS"] = f"dev:{token}"
    flower_auth = None if env.get("FLOWER_BASIC_AUTH") else f"admin:{secrets.token_urlsafe(12)}"
    if flower_auth is not None:
        env["FLOWER_BASIC_AUTH"] = flower_auth

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
    made = {"REDIS_URL"} if redis_server is not None else set()
    redis_source = None if redis_server is not None else (
        "TASKS_BACKEND_REDIS_SENTINELS" if env.get("TASKS_BACKEND_REDIS_SENTINELS") else "REDIS_URL")
    banner = Banner(port=port, flower_port=flower_port, token=token, token_hint=token_hint, flower_auth=flower_auth,
                    redis_url=settings.redis_url, redis_source=redis_source, exports=connection_exports(env, made))
    probes = readiness_probes(settings, port, flower_port, supervisor)
    threading.Thread(target=_announce_when_ready, args=(probes, banner, supervisor.stopping), daemon=True,
                     name="readiness").start()
    supervisor.run()


def connection_exports(env: Mapping[str, str], made: Collection[str] = ()) -> tuple[tuple[str, str | None], ...]:
    """The connection variables of this run, as the pasted block exports them: with its value one that this
    run made (an embedded Redis's URL); without (None) one the user gave, which may hold a password: the block
    keeps the pasting shell's own (see `Banner`). With Sentinels, REDIS_URL is left out: the Sentinels replace it
    (`Settings.from_env`)."""
    skip = {"REDIS_URL"} if env.get("TASKS_BACKEND_REDIS_SENTINELS") else set()
    return tuple((name, env[name] if name in made else None) for name in CONNECTION_VARIABLES
                 if env.get(name) and name not in skip)


def _refuse(message: str) -> NoReturn:
    """Say why nothing was started, once, and exit non-zero."""
    click.echo(message, err=True)
    sys.exit(1)


def _ports_to_suggest(port: str, flower_port: str) -> dict[str, str]:
    """PORT and FLOWER_PORT for another run: these if they are free, else free ones."""
    taken = dict(ports_in_use({"PORT": port, "FLOWER_PORT": flower_port}))
    return {name: str(free_port()) if name in taken else number
            for name, number in (("PORT", port), ("FLOWER_PORT", flower_port))}


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
    """The ready line and the block to paste. It prints what this run made (a development token, Flower's
    password, an embedded Redis's URL) and nothing the user gave: a user's URL is shown with its password masked
    and the variable it came from, and the block refers to the user's own variables rather than repeating their
    values, so that another shell of theirs (which has them, or is told which it lacks) reaches the same system."""

    port: str
    flower_port: str
    #: The token this run made; None when the user has their own (`token_hint` says which).
    token: str | None
    #: `user:password` this run made for Flower; None when the user gave FLOWER_BASIC_AUTH.
    flower_auth: str | None
    redis_url: str
    #: The variable the Redis URL came from; None for the embedded Redis this run started.
    redis_source: str | None
    #: (variable, value) for what this run made, (variable, None) for what the user gave: `connection_exports`.
    exports: tuple[tuple[str, str | None], ...] = ()
    token_hint: str = "a token of yours"  # noqa: S105 - what to paste, not a secret

    def render(self, elapsed_s: float) -> str:
        from tasks_backend.service.runtime import redact_url  # Celery and all: not for every `tasks-backend` command

        url = f"http://127.0.0.1:{self.port}"
        if self.flower_auth is None:
            flower = "user and password from FLOWER_BASIC_AUTH"
        else:
            user, _, password = self.flower_auth.partition(":")
            flower = f"user {user}, password {password}"
        lines = [
            "",
            f"tasks-backend is ready on {url} (web, worker, sweeper and Flower answered in {elapsed_s:.1f}s)",
            f"  Redis:    {redact_url(self.redis_url)}  ({self.redis_source or 'embedded'})",
            f"  Web page: {url}/ui",
            f"  Flower:   http://127.0.0.1:{self.flower_port}  ({flower})",
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
        else:  # the user's own: a line that does nothing when pasted, for them to fill in
            lines.append(f"  # export TASKS_BACKEND_TOKEN=<{self.token_hint}>")
        lines += [*(_export(name, value) if value is not None else _keep(name) for name, value in self.exports), ""]
        return "\n".join(lines)


def _keep(name: str) -> str:
    """The line that exports the pasting shell's own `name`, or stops there saying it lacks one: the value the
    user gave `run` is theirs to have, not the banner's to print."""
    return f'  export {name}="${{{name}:?set it as you did for tasks-backend run}}"'


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
