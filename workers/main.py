"""Entry points that start a worker or Flower from the environment's settings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from celery import signals

from tasks_backend.config import Settings
from tasks_backend.push.subscriptions import PushFormat
from tasks_backend.service.runtime import build_runtime

from . import push, stopping
from .celery_app import create_celery
from .flower import guard_metrics, progress_display, quiet_stop


def start_worker(argv: Sequence[str] = (), settings: Settings | None = None, *, quiet: bool = False,
                 hand_back: bool = False, push_formats: Mapping[str, PushFormat] | None = None) -> int:
    """Run a worker until it stops; return its exit status (non-zero when it gave up, e.g. on the broker).
    `quiet` leaves out Celery's start-up banner and its stop line; `hand_back`: a stop hands running jobs back
    to the queue rather than waiting for them (see `workers.stopping`); `push_formats` (format name ->
    format: the command line passes every adapter's) are the formats push subscriptions are posted in."""
    settings = settings or Settings.from_env()
    build_runtime(settings).declare_schedules()
    app = create_celery(settings)
    push.install(app, settings, push_formats or {})
    stopping.install(app, quiet=quiet, hand_back=hand_back)
    # `app.worker_main` (and `app.start`) drop the worker's exit status: a worker that gave up (broker
    # retries exhausted, an unrecoverable error) would exit 0, and a supervisor that restarts on failure
    # only (systemd's Restart=on-failure) would never bring it back. Read it from the worker itself.
    started: list[Any] = []

    def keep(sender: Any, **_: Any) -> None:
        if sender.app is app:
            started.append(sender)

    signals.worker_init.connect(keep, weak=False)
    app.worker_main([*(["--quiet"] if quiet else []), "worker", "-Q", settings.queue, "--loglevel=INFO", *argv])
    return int(started[0].exitcode or 0) if started else 0  # not started: only printed help


def start_flower(argv: Sequence[str] = (), settings: Settings | None = None) -> None:
    from flower.options import options  # defines Flower's options (format_task among them)

    guard_metrics()
    quiet_stop()
    options.format_task = progress_display(settings)  # a `--format_task` given on the command line wins
    app = create_celery(settings, consumer=False)
    app.start(["flower", *argv])
