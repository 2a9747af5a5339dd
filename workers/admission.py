"""Every worker publishes its slots to the dispatch gate and pumps it (see `tasks_backend.running.admission`):
held jobs go to the broker when the worker starts, delayed jobs when they are due."""

from __future__ import annotations

from typing import Any

from celery import Celery

from tasks_backend.config import Settings
from tasks_backend.running.execution import worker_name
from tasks_backend.service.runtime import build_runtime

from .background import BackgroundStep


def install(app: Celery, settings: Settings) -> None:
    """Run the gate's pump on a thread of the worker's main process, started and stopped with the worker."""

    class PumpDispatchGate(BackgroundStep):
        name = "tasks_backend.admission"

        def start(self, parent: Any) -> None:
            runtime = build_runtime(settings)
            slots = int(getattr(parent, "concurrency", 0) or 1)
            name = f"{worker_name()}:{id(parent):x}"
            admission = runtime.service.admission
            self.run_in_background(lambda stop: admission.run_forever(stop, name, slots), "dispatch-pump")

    app.steps["worker"].add(PumpDispatchGate)
