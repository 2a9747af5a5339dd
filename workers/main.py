"""Entry points that start a worker or Flower from the environment's settings."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from tasks_backend.config import Settings

from . import push
from .celery_app import create_celery
from .flower import guard_metrics


def start_worker(argv: Sequence[str] = (), settings: Settings | None = None) -> None:
    settings = settings or Settings.from_env()
    app = create_celery(settings)
    push.install(app, settings)
    app.worker_main(["worker", "-Q", settings.queue, "--loglevel=INFO", *argv])


def start_flower(argv: Sequence[str] = (), settings: Settings | None = None) -> None:
    guard_metrics()
    app = create_celery(settings, consumer=False)
    app.start(["flower", *argv])


if __name__ == "__main__":
    start_worker(sys.argv[1:])
