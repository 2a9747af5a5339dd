"""The no-op job the product runs in every benchmark (registered through `TASKS_BACKEND_JOBS`)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from marshmallow import Schema, fields

from tasks_backend import job
from tasks_backend.running.context import JobContext


class NoParams(Schema):
    pass


@job("bench.noop", params=NoParams, ttl=3600, poll_interval=1, description="Do nothing; return a small result")
def noop(ctx: JobContext) -> dict[str, Any]:
    return {"ok": True}


class HoldParams(Schema):
    gate = fields.String(required=True)


@job("bench.hold", params=HoldParams, ttl=3600, poll_interval=1, description="Hold a worker until a file exists")
def hold(ctx: JobContext, gate: str) -> dict[str, Any]:
    """Keeps its worker busy until `gate` exists, so that every worker starts on a full queue at once
    (bench/scaling.py); says it started with `<gate>.started.<pid>`."""
    hold_until(gate)
    return {"ok": True}


def hold_until(gate: str, timeout_s: float = 300.0) -> None:
    Path(f"{gate}.started.{os.getpid()}").touch()
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.005)
