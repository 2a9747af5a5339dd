"""The dispatch gate's bypass as its store tests drive it: a runtime whose broker is its store's Redis, with a
worker's slots published, and the helpers that submit, take and run jobs and read where the gate holds them."""

from __future__ import annotations

import json
from collections.abc import Iterator

from tasks_backend.running.admission import DispatchGate
from tasks_backend.service.runtime import Runtime, build_runtime
from tasks_backend.store.admission import GateCall
from tests.conftest import make_settings, single_redis

SLOTS = 2


def made(redis_base: str, **overrides: float) -> Iterator[Runtime]:
    """A runtime whose broker is its store's Redis, with this worker's slots published (the gate's cap)."""
    rt = build_runtime(make_settings(single_redis(redis_base), max_active_jobs=0, rate_limit=0, **overrides))
    gate = DispatchGate(rt.store, rt.dispatcher, rt.settings)
    assert gate.inline, "the broker must be the store's own Redis"
    rt.store.gate_tick(gate.call(), "worker", SLOTS, 600_000)
    yield rt
    rt.store.redis.delete(rt.settings.queue, bypass(rt))


def look_at(rt: Runtime, job_id: str) -> dict[str, int]:
    """A sweep of `job_id` alone (the other jobs' runs here never end their records); what it counted."""
    rt.store.redis.delete(rt.store.keys.sweep())
    rt.store.redis.zadd(rt.store.keys.sweep(), {job_id: 0})
    return rt.sweeper().sweep_once()


def bypass(rt: Runtime) -> str:
    return rt.store.keys.bypass_queue(rt.settings.queue)


def call(rt: Runtime) -> GateCall:
    return DispatchGate(rt.store, rt.dispatcher, rt.settings).call()


def submit(rt: Runtime, owner: str, priority: int = 5, **timing: int) -> str:
    record, _ = rt.service.submit(owner, "test.noop", {}, priority=priority, **timing)
    return record.id


def ids(rt: Runtime, key: str) -> list[str]:
    """The job ids in a broker list, the next to be taken first."""
    return [json.loads(m)["properties"]["correlation_id"] for m in reversed(rt.store.redis.lrange(key, 0, -1))]


def queued(rt: Runtime) -> list[str]:
    """The job ids in the order a worker takes them: the queue's own list, then the bypass list."""
    return ids(rt, rt.settings.queue) + ids(rt, bypass(rt))


def where(rt: Runtime, job_ids: list[str]) -> list[str | None]:
    return [w for w, _ in rt.store.gate_where(call(rt), job_ids)]


def counts(rt: Runtime) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """(messages ever pushed, messages waiting) of the queue's own list and of the bypass list, as the sweeper reads
    them (a job moved from the bypass list to the queue's own left the one and was pushed to the other)."""
    return rt.dispatcher.backlog(), rt.dispatcher.bypass_backlog()


def take(rt: Runtime, job_id: str) -> None:
    """A worker takes `job_id`'s message."""
    for key in (rt.settings.queue, bypass(rt)):
        for message in rt.store.redis.lrange(key, 0, -1):
            if json.loads(message)["properties"]["correlation_id"] == job_id:
                rt.store.redis.lrem(key, 1, message)
                return
    raise AssertionError(f"{job_id} is not in the broker")


def run(rt: Runtime, job_id: str) -> None:
    """A worker takes `job_id`'s message and its run ends."""
    take(rt, job_id)
    rt.store.gate_leave(call(rt), [job_id], final=True)


def drain(rt: Runtime) -> list[str]:
    """Runs every queued job, the next first, until none is left: the order they were taken in."""
    order: list[str] = []
    while waiting := queued(rt):
        order.append(waiting[0])
        run(rt, waiting[0])
    return order
