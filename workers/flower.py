"""What Flower shows for a job: the runner's Celery outcome follows our state through the one table.

The runner task returns normally whatever happened to the job, so Celery would call every run a SUCCESS.
Instead, where the runner reports its outcome, a job that ended `failed` raises `JobFailedOutcome` with the
job's error message (an expected exception in the task's `throws`: logged in one line, message acked), so
Flower shows FAILURE; a job that ended `cancelled` sends `task-revoked` and raises Celery's `Ignore` (acked,
no success reported), so Flower shows REVOKED.
Rule: the job's record in Redis stays the source of truth; this only changes the display.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from celery.exceptions import Ignore

from tasks_backend.config import Settings
from tasks_backend.model.domain import JobRecord, JobState
from tasks_backend.model.states import CELERY_STATES


class JobFailedOutcome(Exception):
    """The job this run executed ended `failed`; the message is the job's own error message."""


_STATE_VALUES = frozenset(s.value for s in JobState)


def celery_outcome(outcome: str, error_message: Callable[[], str | None],
                   revoked: Callable[[], object]) -> str:
    """Return the runner's outcome, or raise what makes Celery report our state as the table maps it.
    `error_message` reads the failed job's message; `revoked` announces the revocation (an event)."""
    state = JobState(outcome) if outcome in _STATE_VALUES else None
    if state is None:
        return outcome
    if "FAILURE" in CELERY_STATES[state]:
        raise JobFailedOutcome(error_message() or f"job {state.value}")
    if "REVOKED" in CELERY_STATES[state]:
        revoked()
        raise Ignore(f"job {state.value}")
    return outcome


log = logging.getLogger(__name__)


def describe_progress(record: JobRecord) -> str | None:
    """'5/10 slept 1.5s of 3s': how a running job's progress reads in Flower's result column."""
    if record.progress is None and not record.status_message:
        return None
    done = "" if record.progress is None else f"{record.progress:g}" + (
        "" if record.total is None else f"/{record.total:g}")
    return " ".join(part for part in (done, record.status_message or "") if part)


def progress_display(settings: Settings | None = None) -> Callable[[Any], Any]:
    """Flower's `format_task`: a running job's progress, read from its record, shown as its result.

    Workers send Celery no events while a job runs (progress is written to the job's record, which every
    API reads); Flower asks the record when it draws a page, for the jobs it shows as STARTED only."""
    holder: dict[str, Any] = {}

    def format_task(task: Any) -> Any:
        if getattr(task, "state", None) != "STARTED" or not getattr(task, "uuid", None):
            return task
        try:
            if "store" not in holder:
                from tasks_backend.service.runtime import build_runtime

                holder["store"] = build_runtime(settings).store
            record = holder["store"].get(task.uuid)
        except Exception:  # a page must draw even when Redis does not answer
            log.debug("no progress for %s", task.uuid, exc_info=True)
            return task
        shown = describe_progress(record) if record is not None else None
        if shown:
            task.result = shown
        return task

    return format_task


#: Where Flower listens unless `FLOWER_ADDRESS` says otherwise: loopback, so that only a proxy or a
#: tunnel on the same host reaches it (its pages name hosts, queues and operations).
DEFAULT_ADDRESS = "127.0.0.1"


def flower_argv(env: Mapping[str, str], extra: Sequence[str] = ()) -> list[str]:
    """Flower's command line from the environment; later `extra` arguments win."""
    args = [f"--port={env.get('FLOWER_PORT') or '5555'}", f"--address={env.get('FLOWER_ADDRESS') or DEFAULT_ADDRESS}"]
    auth = env.get("FLOWER_BASIC_AUTH")
    if auth:
        args.append(f"--basic-auth={auth}")
    return [*args, *extra]


def guard_metrics() -> None:
    """Put Flower's `/metrics` behind the same authentication as its pages (Flower serves it to anyone).

    Flower builds its routes from `flower.urls.handlers` when it starts; the entry is swapped in place."""
    import tornado.web
    from flower import urls
    from flower.views.monitor import Metrics

    class AuthenticatedMetrics(Metrics):  # type: ignore[misc]
        @tornado.web.authenticated
        async def get(self) -> None:
            await super().get()

    for index, handler in enumerate(urls.handlers):
        if isinstance(handler, tuple) and handler[0] == r"/metrics":
            urls.handlers[index] = (r"/metrics", AuthenticatedMetrics)


def quiet_stop() -> None:
    """Flower stops on SIGTERM without a word or a traceback.

    Its own handler logs the signal's number and raises SystemExit wherever the main thread is; a second
    SIGTERM, or one that comes while the interpreter is already exiting (joining its thread pool), printed
    the SystemExit's traceback. The handler Flower installs is looked up when it starts, so it is replaced
    before that: the first SIGTERM ends the IO loop (Flower then stops its app), any later one is ignored."""
    import signal

    from flower import command

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(0)

    command.sigterm_handler = stop
