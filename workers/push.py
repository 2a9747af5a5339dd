"""The Celery bootstep that runs push delivery (`tasks_backend.push.delivery`) in a worker's main process.

Rule: delivery starts and stops with the worker; its formats come from the command line.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from celery import Celery, bootsteps

from tasks_backend.config import Settings
from tasks_backend.push.delivery import PushDeliverer
from tasks_backend.push.subscriptions import PushFormat
from tasks_backend.store.connect import connect
from tasks_backend.store.jobs import RedisStore
from tasks_backend.store.keys import Keys


def install(app: Celery, settings: Settings, formats: Mapping[str, PushFormat]) -> None:
    """Run push delivery in this worker's main process, started and stopped with the worker,
    posting each subscription in its format from `formats` (format name -> format)."""

    class PushDelivery(bootsteps.StartStopStep):
        name = "tasks_backend.push"

        def __init__(self, parent: Any, **kwargs: Any) -> None:
            super().__init__(parent, **kwargs)
            self.stop_event = threading.Event()
            self.thread: threading.Thread | None = None

        def start(self, parent: Any) -> None:
            store = RedisStore(connect(settings.redis_url, settings.redis_socket_timeout_s,
                                       service=settings.redis_service),
                               Keys(settings.key_prefix), max_ttl_ms=int(settings.max_ttl_s * 1000))
            deliverer = PushDeliverer(store, settings, formats=formats)
            self.thread = threading.Thread(target=deliverer.run_forever, args=(self.stop_event,),
                                           name="push-delivery", daemon=True)
            self.thread.start()

        def stop(self, parent: Any) -> None:
            self.stop_event.set()
            if self.thread is not None:
                self.thread.join(timeout=10)

    app.steps["worker"].add(PushDelivery)
