"""The Celery bootstep that runs push delivery (`tasks_backend.push.delivery`) in a worker's main process.

Rule: delivery starts and stops with the worker; its formats come from the command line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from celery import Celery

from tasks_backend.config import Settings
from tasks_backend.push.delivery import PushDeliverer
from tasks_backend.push.subscriptions import PushFormat
from tasks_backend.store.connect import connect
from tasks_backend.store.jobs import RedisStore
from tasks_backend.store.keys import Keys

from .background import BackgroundStep


def install(app: Celery, settings: Settings, formats: Mapping[str, PushFormat]) -> None:
    """Run push delivery in this worker's main process, started and stopped with the worker,
    posting each subscription in its format from `formats` (format name -> format)."""

    class PushDelivery(BackgroundStep):
        name = "tasks_backend.push"
        join_timeout_s = 10.0

        def start(self, parent: Any) -> None:
            store = RedisStore(connect(settings.redis_url, settings.redis_socket_timeout_s,
                                       service=settings.redis_service),
                               Keys(settings.key_prefix), max_ttl_ms=int(settings.max_ttl_s * 1000))
            deliverer = PushDeliverer(store, settings, formats=formats,
                                      tracing=getattr(app, "tasks_backend_tracing", None))
            self.run_in_background(deliverer.run_forever, "push-delivery")

    app.steps["worker"].add(PushDelivery)
