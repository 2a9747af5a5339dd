"""Every worker publishes the operations it runs (see `tasks_backend.running.catalog`), at start and then regularly, so
that an application that only submits needs no job code to check its params."""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery

from tasks_backend.config import Settings
from tasks_backend.running.catalog import Publisher
from tasks_backend.running.registry import JobModuleNotFound, Registry
from tasks_backend.store.connect import connect
from tasks_backend.store.keys import Keys

from .background import BackgroundStep

log = logging.getLogger(__name__)


def install(app: Celery, settings: Settings) -> None:
    """Publish this worker's operations from its main process, started and stopped with the worker."""

    class PublishOperations(BackgroundStep):
        name = "tasks_backend.operations"

        def start(self, parent: Any) -> None:
            try:
                registry = Registry.from_modules(settings.job_modules)
            except JobModuleNotFound as exc:
                log.error("operations not published: %s", exc)
                return
            client = connect(settings.redis_url, settings.redis_socket_timeout_s, service=settings.redis_service)
            publisher = Publisher(client, Keys(settings.key_prefix), registry)
            publisher.publish()  # before the worker is ready: an application may submit as soon as it is
            self.run_in_background(publisher.run_forever, "publish-operations")

    app.steps["worker"].add(PublishOperations)
