"""What Flower shows for a job: the runner's Celery outcome follows our state through the one table.

The runner task returns normally whatever happened to the job, so Celery would call every run a
SUCCESS. For a job that ended `failed`, the runner instead raises `JobFailedOutcome`, an expected
exception (declared in the task's `throws`, so it is logged in one line without a traceback, and
the message is acked): Celery then emits `task-failed` and Flower shows FAILURE, as `CELERY_STATES`
says it should. The job's record in Redis stays the source of truth; this only changes the display.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tasks_backend.domain import JobState
from tasks_backend.states import CELERY_STATES


class JobFailedOutcome(Exception):
    """The job this run executed ended `failed` (its error is in the job record, not here)."""


_STATE_VALUES = frozenset(s.value for s in JobState)


def celery_outcome(outcome: str) -> str:
    """Return the runner's outcome, or raise when our state maps to Celery's FAILURE."""
    state = JobState(outcome) if outcome in _STATE_VALUES else None
    if state is not None and "FAILURE" in CELERY_STATES[state]:
        raise JobFailedOutcome(f"job {state.value}; see its record for the error")
    return outcome


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
