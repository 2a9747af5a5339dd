"""The soak's job functions (named in `TASKS_BACKEND_JOBS` for the web app and the workers).

Every effect goes two ways, so the report can tell the two guarantees apart:
- a line in the ledger (an append-only file, `SOAK_LEDGER`): it shows how often an effect really ran,
  which includes the documented window between an effect and the record of its step;
- a POST to the downstream (`SOAK_DOWNSTREAM`), which deduplicates on `ctx.idempotency_key`: an effect
  that reaches it under two different keys was applied twice, and that must never happen.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import httpx
from marshmallow import Schema, fields, validate

from tasks_backend import Concurrency, JobContext, job
from tasks_backend.running.context import PARK_MIN_S

TTL_S = 3600


def _ledger(entry: dict[str, Any]) -> None:
    path = os.environ.get("SOAK_LEDGER")
    if path:
        # One write of one short line to an O_APPEND file: lines from several processes never interleave.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode())
        finally:
            os.close(fd)


def _downstream(body: dict[str, Any]) -> None:
    url = os.environ.get("SOAK_DOWNSTREAM")
    if not url:
        return
    deadline = time.monotonic() + 30
    while True:  # the downstream belongs to the harness and is never faulted, but be patient with it
        try:
            httpx.post(url, json=body, timeout=5).raise_for_status()
            return
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _effect(ctx: JobContext, name: str, **extra: Any) -> dict[str, Any]:
    _ledger({"job": ctx.job_id, "step": name, "pid": os.getpid(), "attempt": ctx.attempt, **extra})
    _downstream({"job": ctx.job_id, "step": name, "key": ctx.idempotency_key(name)})
    return {"applied": name}


class StepsParams(Schema):
    steps = fields.Integer(load_default=3, validate=validate.Range(min=1, max=20))
    pause = fields.Float(load_default=0.1, validate=validate.Range(min=0, max=10))
    #: A path: before each step after the first, wait until `<gate>.<step>` exists (a test holds the job there).
    gate = fields.String(load_default=None, allow_none=True)


@job("soak.steps", params=StepsParams, ttl=TTL_S, poll_interval=0.5, description="Recorded effects, one per step")
def steps(ctx: JobContext, steps: int, pause: float, gate: str | None) -> dict[str, Any]:
    return _steps(ctx, steps, pause, gate)


class LaneParams(StepsParams):
    lane = fields.String(required=True)


@job("soak.lane", params=LaneParams, ttl=TTL_S, poll_interval=0.5, concurrency=Concurrency(max=1, key="lane"),
     description="Recorded effects, one job per lane at a time")
def lane(ctx: JobContext, steps: int, pause: float, gate: str | None, lane: str) -> dict[str, Any]:
    return _steps(ctx, steps, pause, gate)


def _steps(ctx: JobContext, steps: int, pause: float, gate: str | None) -> dict[str, Any]:
    for i in range(steps):
        ctx.sleep(pause)
        while i > 0 and gate and not os.path.exists(f"{gate}.{i}"):
            ctx.sleep(0.02)
        name = f"s{i}"
        ctx.step(name, lambda: _effect(ctx, name))  # noqa: B023 - called at once, inside this iteration
        ctx.progress(i + 1, steps, f"step {i + 1}/{steps}")
    return {"steps": steps}


APPROVAL = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}


class AskParams(Schema):
    pause = fields.Float(load_default=0.05, validate=validate.Range(min=0, max=10))


@job("soak.ask", params=AskParams, ttl=TTL_S, poll_interval=0.5, description="Asks for approval, then one effect")
def ask(ctx: JobContext, pause: float) -> dict[str, Any]:
    ctx.sleep(pause)
    answer = ctx.ask("approval", "Go ahead?", APPROVAL)
    if not answer or not answer.get("approved"):
        return {"approved": False}
    ctx.step("after", lambda: _effect(ctx, "after"))
    return {"approved": True}


class SleepParams(Schema):
    seconds = fields.Float(load_default=3, validate=validate.Range(min=0, max=600))


@job("soak.sleep", params=SleepParams, ttl=TTL_S, poll_interval=0.5, description="Sleeps in slices (to be cancelled)")
def sleep(ctx: JobContext, seconds: float) -> dict[str, Any]:
    slices = max(1, int(seconds / 0.1))
    for i in range(slices):
        ctx.progress(i, slices, "sleeping")
        ctx.sleep(seconds / slices)
    return {"slept": seconds}


class FailParams(Schema):
    message = fields.String(load_default="planned failure")


class PlannedFailure(Exception):
    pass


@job("soak.fail", params=FailParams, ttl=TTL_S, poll_interval=0.5, description="Fails on purpose")
def fail(ctx: JobContext, message: str) -> None:
    raise PlannedFailure(message)


class ProbeParams(Schema):
    pass


@job("soak.probe", params=ProbeParams, ttl=TTL_S, poll_interval=0.2, description="Completes at once (recovery probe)")
def probe(ctx: JobContext) -> dict[str, Any]:
    return {"ok": True}


class NapParams(Schema):
    seconds = fields.Float(load_default=PARK_MIN_S, validate=validate.Range(min=PARK_MIN_S, max=60))


@job("soak.nap", params=NapParams, ttl=TTL_S, poll_interval=0.5, description="An effect, a parked sleep, an effect")
def nap(ctx: JobContext, seconds: float) -> dict[str, Any]:
    ctx.step("s0", lambda: _effect(ctx, "s0"))
    ctx.sleep(seconds)  # >= PARK_MIN_S: the job parks, holding no worker, and replays from the top at the end
    ctx.step("s1", lambda: _effect(ctx, "s1"))
    return {"slept": seconds}


class ParentParams(Schema):
    children = fields.Integer(load_default=2, validate=validate.Range(min=1, max=10))
    steps = fields.Integer(load_default=1, validate=validate.Range(min=1, max=5))


@job("soak.parent", params=ParentParams, ttl=TTL_S, poll_interval=0.5,
     description="Spawns children doing recorded effects, waits for them, returns their results")
def parent(ctx: JobContext, children: int, steps: int) -> dict[str, Any]:
    ids = [ctx.spawn("soak.steps", {"steps": steps, "pause": 0.05}) for _ in range(children)]
    results = ctx.wait_for(ids)
    ctx.step("after", lambda: _effect(ctx, "after"))
    return {"children": ids, "results": results}


class TickParams(Schema):
    schedule = fields.String(required=True)


@job("soak.tick", params=TickParams, ttl=TTL_S, poll_interval=0.5, description="One effect per tick of a schedule")
def tick(ctx: JobContext, schedule: str) -> dict[str, Any]:
    ctx.step("s0", lambda: _effect(ctx, "s0", schedule=schedule))
    return {"schedule": schedule}
