"""Every worker publishes the operations it runs (see `tasks_backend.running.catalog`), at start and then regularly, so
that an application that only submits needs no job code to check its params."""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import Celery, bootsteps

from tasks_backend.config import Settings
from tasks_backend.running.catalog import Publisher
from tasks_backend.running.registry import JobModuleNotFound, Registry
from tasks_backend.store.connect import connect
from tasks_backend.store.keys import Keys

log = logging.getLogger(__name__)


def install(app: Celery, settings: Settings) -> None:
    """Publish this worker's operations from its main process, started and stopped with the worker."""

    class PublishOperations(bootsteps.StartStopStep):
        name = "tasks_backend.operations"

        def __init__(self, parent: Any, **kwargs: Any) -> None:
            super().__init__(parent, **kwargs)
            self.stop_event = threading.Event()
            self.thread: threading.Thread | None = None

        def start(self, parent: Any) -> None:
            try:
                registry = Registry.from_modules(settings.job_modules)
            except JobModuleNotFound as exc:
                log.error("operations not published: %s", exc)
                return
            client = connect(settings.redis_url, settings.redis_socket_timeout_s, service=settings.redis_service)
            publisher = Publisher(client, Keys(settings.key_prefix), registry)
            publisher.publish()  # before the worker is ready: an application may submit as soon as it is
            self.thread = threading.Thread(target=publisher.run_forever, args=(self.stop_event,),
                                           name="publish-operations", daemon=True)
            self.thread.start()

        def stop(self, parent: Any) -> None:
            self.stop_event.set()
            if self.thread is not None:
                self.thread.join(timeout=5)

    app.steps["worker"].add(PublishOperations)
