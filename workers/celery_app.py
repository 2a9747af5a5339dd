"""The Celery app factory and the one generic runner task."""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

from celery import Celery, Task, signals

from tasks_backend.config import Settings
from tasks_backend.running.dispatch import RUN_TASK, celery_config
from tasks_backend.service.runtime import Runtime, build_runtime
from tasks_backend.serving.tracing import Tracing

from . import admission, operations, remote_polling, waking
from .broker import FETCH_CLAIM, fetch_claim_options, worker_transport
from .flower import JobFailedOutcome, celery_outcome

log = logging.getLogger(__name__)


def create_celery(settings: Settings | None = None, *, consumer: bool = True) -> Celery:
    """A Celery app whose workers run registered jobs by id (`consumer=False` for Flower, which only
    watches). The runtime is built lazily per process, after the prefork pool has forked, so no Redis
    connection crosses a fork."""
    settings = settings or Settings.from_env()
    app = Celery("tasks_backend", set_as_current=False)
    app.conf.update(celery_config(settings, consumer=consumer))
    if consumer and (transport := worker_transport(settings.effective_broker_url)):
        app.conf.broker_transport = transport  # a lost broker is reconnected to, not fatal: see broker.py
        app.conf.broker_transport_options = {**app.conf.broker_transport_options, **fetch_claim_options(settings)}
    # Read once, here: the runtime built later in each process (and push delivery) share it.
    tracing = Tracing.from_env() if consumer else Tracing.off()
    app.tasks_backend_tracing = tracing  # type: ignore[attr-defined]
    lock = threading.Lock()
    holder: dict[str, Runtime] = {}
    # Set when this process's worker stops (workers.stopping): the executor hands its running jobs back.
    stopping = threading.Event()

    def runtime() -> Runtime:
        with lock:
            if "rt" not in holder:
                rt = build_runtime(settings, celery_app=app, tracing=tracing)
                rt.executor().stopping = stopping
                holder["rt"] = rt
            return holder["rt"]

    app.tasks_backend_runtime = runtime  # type: ignore[attr-defined]
    app.tasks_backend_stopping = stopping  # type: ignore[attr-defined]
    # This process's executor if it ever ran a job (nothing to hand back otherwise).
    app.tasks_backend_executor = lambda: holder["rt"].executor() if "rt" in holder else None  # type: ignore[attr-defined]

    def flush(**_: Any) -> None:
        """Write the last second's deferred metrics and schedule cleanup before the process goes."""
        if "rt" in holder:
            holder["rt"].executor().flush()
        tracing.flush()

    # weak=False: the receivers are closures that nothing else holds.
    signals.worker_process_shutdown.connect(flush, weak=False)
    signals.worker_shutdown.connect(flush, weak=False)

    @app.task(name=RUN_TASK, bind=True, shared=False, acks_late=True, reject_on_worker_lost=True,
              ignore_result=True, throws=(JobFailedOutcome,))
    def run_job(self: Task[Any, Any], job_id: str) -> str:
        fetched = self.request.get(FETCH_CLAIM)
        # The claim made with the fetch, when it was this job's (a message whose task id is not its job's, sent
        # by hand, is claimed here as any other).
        outcome = runtime().executor().run(job_id, fetched[1] if fetched and fetched[0] == job_id else None)
        # Celery's own line already carries the outcome; say more only when the job did not complete.
        log.log(logging.DEBUG if outcome == "completed" else logging.INFO, "job %s: %s", job_id, outcome)
        if outcome == "completed":
            return outcome
        return celery_outcome(outcome, functools.partial(_error_message, runtime(), job_id),
                              functools.partial(self.send_event, "task-revoked", terminated=False, expired=False))

    if consumer:
        operations.install(app, settings)  # what an application that only submits checks against
        waking.install(app, settings)  # sleepers at their time, parents whose children finished
        admission.install(app, settings)  # this worker's slots, and the pump of held and delayed jobs
        remote_polling.install(app, settings)  # other agents' tasks that parked jobs wait on
    return app


def _error_message(runtime: Runtime, job_id: str) -> str | None:
    """A failed job's own error message, for Flower (read only when a job failed)."""
    record = runtime.store.get(job_id)
    error = record.error if record is not None else None
    return str(error.get("message")) if error and error.get("message") else None
