"""`tasks-backend`: start the system (`run`) or one of its processes (`web`, `worker`, `sweeper`, `flower`)."""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import signal
import subprocess
import sys
import threading
from pathlib import Path

import click

from .cli_client import register_client_commands
from .embedded import EmbeddedRedis, die_with_parent, free_port
from .logs import configure_logging
from .supervisor import Supervisor


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """tasks-backend: long-running jobs behind task handles."""
    configure_logging()


def _python(*args: str) -> list[str]:
    return [sys.executable, "-m", "tasks_backend.cli", *args]


@main.command()
@click.option("--workers", default=2, show_default=True, help="gunicorn worker processes")
@click.option("--connections", type=int, default=lambda: int(os.environ.get("WEB_CONNECTIONS", "1000")),
              show_default="1000 or $WEB_CONNECTIONS",
              help="open connections per worker (gevent); event streams and blocking sends each hold one")
@click.option("--threads", type=int, default=lambda: int(os.environ["WEB_THREADS"]) if os.environ.get(
              "WEB_THREADS") else None, show_default="unset or $WEB_THREADS",
              help="serve with threads instead (1 = sync workers, >1 = gthread): a stream then holds a thread")
@click.option("--bind", default=None, help="host:port (default 0.0.0.0:$PORT, PORT default 8000)")
def web(workers: int, connections: int, threads: int | None, bind: str | None) -> None:
    """Serve the HTTP, MCP and A2A APIs under gunicorn."""
    bind = bind or f"0.0.0.0:{os.environ.get('PORT', '8000')}"
    # gevent by default: a stream or a slow client costs a greenlet, not capacity that polls and submits need,
    # and the worker enforces header and body read deadlines (tasks_backend.web_worker).
    worker_class = ["--worker-class", "tasks_backend.web_worker.DeadlineGeventWorker",
                    "--worker-connections", str(connections)]
    if threads == 1:
        worker_class = ["--worker-class", "sync"]
    elif threads is not None:
        worker_class = ["--worker-class", "gthread", "--threads", str(threads)]
    argv = [sys.executable, "-m", "gunicorn", "--bind", bind, "--workers", str(workers), *worker_class,
            "--timeout", "60", "--graceful-timeout", "30",
            "--access-logfile", "-", "--config", "python:tasks_backend.gunicorn_conf",
            "adapters.app:create_app()"]
    # One secret for the web page's sessions across all the workers; a restart makes a new one unless it is set.
    os.environ.setdefault("TASKS_BACKEND_UI_SECRET", secrets.token_urlsafe(32))
    os.execvp(sys.executable, argv)  # noqa: S606 - this process becomes gunicorn


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.pass_context
def worker(ctx: click.Context) -> None:
    """Run a Celery worker (extra arguments go to `celery worker`)."""
    from workers.main import start_worker

    sys.exit(start_worker(ctx.args))


@main.command()
def sweeper() -> None:
    """Run the sweeper loop (safe to run on several machines)."""
    from .runtime import build_runtime

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        build_runtime().sweeper().run_forever(stop)


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.pass_context
def flower(ctx: click.Context) -> None:
    """Run Flower behind basic auth (FLOWER_BASIC_AUTH=user:password), on 127.0.0.1 unless FLOWER_ADDRESS says."""
    from workers.flower import flower_argv
    from workers.main import start_flower

    if not os.environ.get("FLOWER_BASIC_AUTH") and os.environ.get("TASKS_BACKEND_DEV") != "1":
        raise click.ClickException("FLOWER_BASIC_AUTH=user:password is required outside development.")
    start_flower(flower_argv(os.environ, ctx.args))


@main.command()
@click.option("--data-dir", default=".tasks-backend", show_default=True, help="where the embedded Redis keeps its AOF")
def run(data_dir: str) -> None:
    """Start everything on this machine: Redis (embedded unless REDIS_URL or Sentinels are set), web, worker,
    sweeper, Flower."""
    env = dict(os.environ)
    env["TASKS_BACKEND_DEV"] = "1"
    redis_server: EmbeddedRedis | None = None
    if not env.get("REDIS_URL") and not env.get("TASKS_BACKEND_REDIS_SENTINELS"):
        path = Path(data_dir, "redis")
        path.mkdir(parents=True, exist_ok=True)
        redis_server = EmbeddedRedis(port=free_port(), data_dir=str(path.resolve())).start()
        env["REDIS_URL"] = redis_server.url
    token = None
    if not (env.get("TASKS_BACKEND_TOKENS") or env.get("TASKS_BACKEND_TOKENS_FILE")
            or env.get("TASKS_BACKEND_JWT_SECRET") or env.get("TASKS_BACKEND_JWT_PUBLIC_KEY")):
        token = secrets.token_urlsafe(24)
        env["TASKS_BACKEND_TOKENS"] = f"dev:{token}"
    env.setdefault("FLOWER_BASIC_AUTH", f"admin:{secrets.token_urlsafe(12)}")
    port = env.setdefault("PORT", "8000")
    flower_port = env.setdefault("FLOWER_PORT", "5555")

    supervisor = Supervisor()
    supervisor.install_signal_handlers()
    if redis_server is not None:
        assert redis_server.process is not None
        supervisor.add("redis", redis_server.spawn, redis_server.process, stop_last=True)
    commands = {
        "web": _python("web", "--bind", f"127.0.0.1:{port}"),
        "worker": _python("worker", "--concurrency", "2"),
        "sweeper": _python("sweeper"),
        "flower": _python("flower", "--address=127.0.0.1"),
    }
    for name, argv in commands.items():
        supervisor.add(name, functools.partial(_spawn, argv, env))
    _banner(port, flower_port, token, env["FLOWER_BASIC_AUTH"], redis_server)
    supervisor.run()


def _spawn(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    # A `run` that is killed outright takes its children with it (Linux), as it does the embedded Redis.
    return subprocess.Popen(argv, env=env, preexec_fn=die_with_parent)


def _banner(port: str, flower_port: str, token: str | None, flower_auth: str, server: EmbeddedRedis | None) -> None:
    shown = token or "<one of your TASKS_BACKEND_TOKENS>"
    lines = [
        "",
        f"tasks-backend is starting on http://127.0.0.1:{port}",
        f"  Redis:  {server.url + ' (embedded)' if server else 'REDIS_URL'}",
        f"  Flower: http://127.0.0.1:{flower_port}  (basic auth {flower_auth})",
        f"  Token:  {shown}" + ("  (development token, made for this run)" if token else ""),
        "",
        "Try:",
        f"  export TOKEN={shown}",
        f"  curl -s -X POST http://127.0.0.1:{port}/v1/jobs -H \"Authorization: Bearer $TOKEN\" \\",
        "       -H 'Content-Type: application/json' -d '{\"operation\": \"demo.sleep\", \"params\": {\"seconds\": 5}}'",
        f"  curl -s http://127.0.0.1:{port}/v1/jobs/<taskId> -H \"Authorization: Bearer $TOKEN\"",
        "",
    ]
    click.echo("\n".join(lines))


register_client_commands(main)

if __name__ == "__main__":
    main()
