"""A job module that declares a schedule beside its job, as an application would (tests/tasks_backend/running/
test_declared.py names it in `TASKS_BACKEND_JOBS`)."""

from __future__ import annotations

from typing import Any

from tasks_backend import JobContext, job, schedule


@job("test.report", ttl=600, poll_interval=0.1)
def report(ctx: JobContext) -> dict[str, Any]:
    return {"reported": True}


nightly = schedule("declared-nightly", "test.report", cron="0 3 * * *", timezone="Europe/Paris",
                   owner="alice", catch_up="none")
