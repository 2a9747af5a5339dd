"""`tasks-backend`: start the system (`run`) or one of its processes (`web`, `worker`, `sweeper`, `flower`)."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import sys
import threading
import warnings

import click

from tasks_backend.serving.logs import configure_logging

from .audit_commands import audit
from .client_commands import register_client_commands
from .operate_commands import cancel, rerun
from .run import run
from .schedule_commands import schedule
from .webhook_commands import webhook_secret


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """tasks-backend: long-running jobs behind task handles."""
    configure_logging()


def _quiet() -> bool:
    """Under `run` (one terminal for everything) the children leave out what only operators of a
    deployment need to see: Celery's banner, its warning about running as root, Flower's complaints
    about workers that have not answered yet."""
    return os.environ.get("TASKS_BACKEND_DEV") == "1"


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
    # and the worker enforces header and body read deadlines (tasks_backend.serving.web_worker).
    worker_class = ["--worker-class", "tasks_backend.serving.web_worker.DeadlineGeventWorker",
                    "--worker-connections", str(connections)]
    if threads == 1:
        worker_class = ["--worker-class", "sync"]
    elif threads is not None:
        worker_class = ["--worker-class", "gthread", "--threads", str(threads)]
    argv = [sys.executable, "-m", "gunicorn", "--bind", bind, "--workers", str(workers), *worker_class,
            "--timeout", "60", "--graceful-timeout", "30",
            "--access-logfile", "-", "--config", "python:tasks_backend.serving.gunicorn_conf",
            "adapters.app:create_app()"]
    # One secret for the web page's sessions across all the workers; a restart makes a new one unless it is set.
    os.environ.setdefault("TASKS_BACKEND_UI_SECRET", secrets.token_urlsafe(32))
    os.execvp(sys.executable, argv)  # noqa: S606 - this process becomes gunicorn


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--hand-back-on-stop", is_flag=True,
              help="on SIGTERM, hand running jobs back to the queue at their next cancellation point (to resume "
                   "from their last recorded step) instead of letting them finish")
@click.pass_context
def worker(ctx: click.Context, hand_back_on_stop: bool) -> None:
    """Run a Celery worker (extra arguments go to `celery worker`)."""
    from celery.exceptions import SecurityWarning

    from adapters.protocol import push_formats
    from workers.main import start_worker

    if _quiet():
        warnings.filterwarnings("ignore", category=SecurityWarning)
    sys.exit(start_worker(ctx.args, quiet=_quiet(), hand_back=hand_back_on_stop,
                          push_formats=push_formats()))


@main.command()
def sweeper() -> None:
    """Run the sweeper loop and the schedules' ticker (both safe to run on several machines)."""
    from tasks_backend.remote.polling import RemotePoller
    from tasks_backend.service.runtime import build_runtime

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    runtime = build_runtime()
    runtime.declare_schedules()
    ticker = threading.Thread(target=runtime.schedules().ticker().run_forever, args=(stop,), name="ticker",
                              daemon=True)
    ticker.start()
    # Waiting jobs are woken at their time by a loop of its own, not at the sweep's pace.
    threading.Thread(target=runtime.waker().run_forever, args=(stop,), name="wake-waiting", daemon=True).start()
    threading.Thread(target=RemotePoller(runtime.store, runtime.waker(), runtime.settings).run_forever, args=(stop,),
                     name="poll-remotes", daemon=True).start()
    with contextlib.suppress(KeyboardInterrupt):
        runtime.sweeper().run_forever(stop)
    stop.set()
    ticker.join(5)


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.pass_context
def flower(ctx: click.Context) -> None:
    """Run Flower behind basic auth (FLOWER_BASIC_AUTH=user:password), on 127.0.0.1 unless FLOWER_ADDRESS says."""
    from workers.flower import flower_argv
    from workers.main import start_flower

    if not os.environ.get("FLOWER_BASIC_AUTH") and os.environ.get("TASKS_BACKEND_DEV") != "1":
        raise click.ClickException("FLOWER_BASIC_AUTH=user:password is required outside development.")
    if _quiet():
        logging.getLogger("flower.inspector").setLevel(logging.CRITICAL)
    start_flower(flower_argv(os.environ, ctx.args))


main.add_command(run)
main.add_command(schedule)
main.add_command(webhook_secret)
main.add_command(audit)
register_client_commands(main)
main.add_command(cancel)
main.add_command(rerun)

if __name__ == "__main__":
    main()
