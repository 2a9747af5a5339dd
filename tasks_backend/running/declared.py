"""Schedules declared in code, beside the jobs they run, as Celery beat's users declare theirs:
`nightly = schedule("nightly-report", "reports.daily", cron="0 3 * * *", owner="reports-bot")` in a job module.

`owner` is the principal the schedule and its jobs belong to: give that principal a token
(`tasks-backend token add reports-bot`), or name a JWT's (`jwt:<sub>`), to read them. A declaration only
marks a module variable; a worker and a sweeper collect the declarations of the job modules
(`TASKS_BACKEND_JOBS`) when they start and put them in place (`ScheduleService.declare`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..model.schedules import ScheduleSpec


@dataclass(frozen=True)
class DeclaredSchedule:
    """A schedule as a job module declares it: what `POST /v1/schedules` would define, and for whom."""

    owner: str
    spec: ScheduleSpec

    @property
    def name(self) -> str:
        return self.spec.name

    def body(self) -> dict[str, Any]:
        """The declaration as the body of `POST /v1/schedules` (checked there like any other)."""
        return self.spec.wire()


def schedule(name: str, operation: str, *, owner: str, params: dict[str, Any] | None = None,
             cron: str | None = None, every: int | None = None, timezone: str = "UTC", catch_up: str = "latest",
             priority: int = 5) -> DeclaredSchedule:
    """Declare the schedule `name`: `operation` with `params` at each tick of `cron` (in `timezone`) or
    `every` seconds, owned by the principal `owner`. Assign it to a module variable of a job module."""
    bare = owner.removeprefix("jwt:")
    if not bare or any(c in bare for c in ":\n\r#"):
        raise ValueError("a schedule's owner is a principal's name (a token's: no ':', '#' or newlines; or a "
                         "JWT's: 'jwt:' and its subject)")
    return DeclaredSchedule(owner, ScheduleSpec(name=name, operation=operation, params=dict(params or {}),
                                                cron=cron, every_s=every, timezone=timezone, catch_up=catch_up,
                                                priority=priority))


def declared_in(modules: Iterable[str]) -> list[DeclaredSchedule]:
    """The schedules the modules declare (module variables), in the modules' order."""
    found: list[DeclaredSchedule] = []
    for module_name in modules:
        module = importlib.import_module(module_name)
        found.extend(v for v in vars(module).values() if isinstance(v, DeclaredSchedule))
    return found
