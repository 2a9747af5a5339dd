"""The Celery bootstep that wakes waiting jobs (`tasks_backend.running.waking`) from a worker's main process.

Rule: the waker starts and stops with the worker; any number of workers and sweepers may run one at once.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from tasks_backend.config import Settings
from tasks_backend.running.registry import Registry
from tasks_backend.service.runtime import build_runtime

from .background import BackgroundStep


def install(app: Celery, settings: Settings) -> None:
    """Wake this deployment's sleepers at their time, and parents whose children finished, from this worker."""

    class WakeWaiting(BackgroundStep):
        name = "tasks_backend.waking"

        def start(self, parent: Any) -> None:
            runtime = build_runtime(settings, registry=Registry(), celery_app=app)
            self.run_in_background(runtime.waker().run_forever, "wake-waiting")

    app.steps["worker"].add(WakeWaiting)
