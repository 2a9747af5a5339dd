"""The Celery bootstep that watches other agents' tasks for parked jobs (`tasks_backend.remote.polling`).

Rule: it starts and stops with the worker; any number of workers and sweepers may run one at once.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from tasks_backend.config import Settings
from tasks_backend.remote.polling import RemotePoller
from tasks_backend.running.registry import Registry
from tasks_backend.service.runtime import build_runtime

from .background import BackgroundStep


def install(app: Celery, settings: Settings) -> None:
    """Poll the remote tasks this deployment's parked jobs wait on, from this worker's main process."""

    class PollRemotes(BackgroundStep):
        name = "tasks_backend.remote_polling"

        def start(self, parent: Any) -> None:
            runtime = build_runtime(settings, registry=Registry(), celery_app=app)
            self.run_in_background(RemotePoller(runtime.store, runtime.waker(), settings).run_forever, "poll-remotes")

    app.steps["worker"].add(PollRemotes)
