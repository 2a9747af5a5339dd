"""The no-op job the product runs in every benchmark (registered through `TASKS_BACKEND_JOBS`)."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema

from tasks_backend import job
from tasks_backend.execution import JobContext


class NoParams(Schema):
    pass


@job("bench.noop", params=NoParams, ttl=3600, poll_interval=1, description="Do nothing; return a small result")
def noop(ctx: JobContext) -> dict[str, Any]:
    return {"ok": True}
