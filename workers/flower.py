"""What Flower shows for a job: the runner's Celery outcome follows our state through the one table.

The runner task returns normally whatever happened to the job, so Celery would call every run a
SUCCESS. Instead, at the one spot where the runner reports its outcome:

- a job that ended `failed` raises `JobFailedOutcome` carrying the job's own error message, an
  expected exception (declared in the task's `throws`, so it is logged in one line without a
  traceback, and the message is acked): Celery emits `task-failed` and Flower shows FAILURE with it;
- a job that ended `cancelled` sends `task-revoked` and raises Celery's `Ignore` (the message is
  acked, no success is reported): Flower shows REVOKED.

The job's record in Redis stays the source of truth; this only changes the display.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from celery.exceptions import Ignore

from tasks_backend.domain import JobState
from tasks_backend.states import CELERY_STATES


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
