"""Retained finished handles, made fast through the store's own code and scripts.

Each job goes through the same calls a real one does: `JobService.submit` (fields, record, owner
index, sweep entry), `RedisStore.claim` and `RedisStore.transition` to completed with a small
result, exactly as the runner calls them. Only the round trips are batched: `_Batched` collects the
store's pipelines and sends a few hundred jobs' worth at once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tasks_backend.model.domain import JobState
from tasks_backend.service.jobs import JobService
from tasks_backend.service.runtime import Runtime
from tasks_backend.store.fields import Change
from tasks_backend.store.jobs import RedisStore
from tasks_backend.store.runner import new_request_id

RESULT = json.dumps({"ok": True})
WORKER = "bench-host:1"
#: Owners hold this many handles each, so owner indexes have the encoding a busy owner's has.
PER_OWNER = 1000


class _NoDispatch:
    def publish(self, job_id: str, operation: str, countdown_s: float | None = None) -> None:
        pass  # retained handles are finished: nothing to run

    def ping(self) -> bool:
        return True

    def backlog(self) -> tuple[int, int] | None:
        return None

    def bypass_backlog(self) -> tuple[int, int] | None:
        return None


class _Reply(tuple[str, str, str]):
    """Read as a transition's reply, and as a createdAt by create (`int()`)."""

    def __int__(self) -> int:
        return 0


class _Batched(RedisStore):
    """A store whose round trips are collected, then sent as one pipeline by `flush`."""

    # Stand-in replies that read as success to the calls made through `_run` here: create reads (createdAt,
    # None: created) from [0] on a single Redis, from [0] and [1] on a cluster; transition reads [0] = (outcome,
    # state before, time). Times are Redis's; the stand-in's only feeds the record the submit returns. The claim
    # is queued with `claim_later`, which reads nothing. The real replies are checked in `flush` (errors raise).
    _REPLY: list[Any] = [_Reply(("ok", "running", "0")), None]
    _CREATED: list[Any] = [[0, None]]

    def __init__(self, store: RedisStore) -> None:
        super().__init__(store.redis, store.keys, max_ttl_ms=store.max_ttl_ms)
        self.scripts.load()
        self._builds: list[Callable[[Any], None]] = []
        self._creating = False

    def create(self, *args: Any, **kwargs: Any) -> tuple[int | None, str | None]:
        self._creating = True
        try:
            return super().create(*args, **kwargs)
        finally:
            self._creating = False

    def _run(self, build: Callable[[Any], None], *, in_order: bool = False) -> list[Any]:
        self._builds.append(build)  # one Redis runs a pipeline in order: `in_order` asks nothing more here
        return list(self._CREATED if self._creating and self.single else self._REPLY)

    def claim_later(self, job_id: str, *, lease_ms: int, max_attempts: int) -> None:
        """The product's claim script, queued for the next flush (its reply is not needed here)."""
        self._builds.append(lambda p: self._eval(p, "claim", self.keys.job_keys(job_id), new_request_id(),
                                                 lease_ms, WORKER, max_attempts, '{"message": "", "type": ""}'))

    def flush(self) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for build in self._builds:
            build(pipe)
        self._builds = []
        pipe.execute()


def finished_handles(runtime: Runtime, start: int, count: int, *, owner: Callable[[int], str],
                     batch: int = 300) -> list[str]:
    """Create `count` completed jobs (numbered from `start`, owned by `owner(n)`); returns their ids."""
    store = _Batched(runtime.store)
    # Past the gate: a finished job has left it, and entries left behind would hold the gate's room from real runs.
    service = JobService(store, runtime.registry, _NoDispatch(), runtime.settings.with_(fair_shares=False))
    lease_ms = int(runtime.settings.lease_s * 1000)
    ids: list[str] = []
    for n in range(start, start + count):
        record, _ = service.submit(owner(n), "bench.noop", {})
        store.claim_later(record.id, lease_ms=lease_ms, max_attempts=runtime.settings.max_attempts)
        store.transition(record.id, JobState.COMPLETED, token=1, change=Change.completed(RESULT))
        ids.append(record.id)
        if len(ids) % batch == 0:
            store.flush()
    store.flush()
    return ids


def drop_feeds(runtime: Runtime, ids: list[str], batch: int = 5000) -> None:
    """Remove the finished jobs' event feeds, as their expiry 60 s after the end would (so memory can be read now)."""
    keys = runtime.store.keys
    for i in range(0, len(ids), batch):
        runtime.store.redis.unlink(*[keys.events(j) for j in ids[i:i + batch]])
