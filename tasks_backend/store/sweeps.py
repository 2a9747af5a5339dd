"""The sweep schedule: which jobs the sweeper looks at when, and what it finds (see `scripts/sweep_one.lua`).

Rule: part of the job store (`RedisStore` schedules through `SweepSchedule`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .connect import redis_errors
from .outcomes import Swept
from .part import StorePart
from .runner import new_request_id


class SweepSchedule(StorePart):
    """The sweeper's side of the job store."""

    def tracked(self) -> int:
        """How many jobs the sweeper watches (queued or running ones, each on the sweep schedule)."""
        with redis_errors():
            return int(self.redis.zcard(self.keys.sweep()))

    def due_for_sweep(self, limit: int) -> tuple[int, list[tuple[str, str]]]:
        """(Redis's time now, up to `limit` (job id, score) entries of the sweep schedule due by then)."""
        reply = self.scripts.call("due", [self.keys.sweep()], limit)
        return int(reply[0]), [(str(reply[i]), str(reply[i + 1])) for i in range(1, len(reply), 2)]

    def sweep_many(self, job_ids: Sequence[str], *, grace_ms: int, max_attempts: int,
                   abandoned_error: dict[str, Any], backlog: tuple[int, int] | None,
                   bypassed: bool = False) -> list[tuple[Swept, int, str]]:
        """Look at each job (one script each, one round trip): (action, when due next, operation) each,
        with action republish | later | done | gone. `backlog` is (messages ever pushed to the queue,
        messages waiting in it) for a broker that can tell, else None; `bypassed`: the jobs were sent past
        the dispatch gate, and `backlog` is the bypass list's."""
        error = json.dumps(abandoned_error)
        pushed, waiting = ("", "") if backlog is None else backlog

        def build(p: Any) -> None:
            for job_id in job_ids:
                self._eval(p, "sweep_one", self.keys.job_keys(job_id), new_request_id(), grace_ms, max_attempts,
                           error, pushed, waiting, "b" if bypassed else "")

        return [(Swept(a), int(float(w)), str(o)) for a, w, o in self._run(build)] if job_ids else []

    def settle_sweep(self, entries: Sequence[tuple[str, str, int | None]]) -> None:
        """Set each (job id, score seen, next due or None to drop) entry, unless the entry was written
        again since it was read (then the newer entry stands). One command."""
        if not entries:
            return
        args = [x for job_id, seen, at in entries for x in (job_id, seen, "" if at is None else at)]
        self.scripts.call("reschedule", [self.keys.sweep()], *args)

    def schedule_sweep(self, job_id: str, in_ms: int) -> None:
        """Make the job due for the sweeper `in_ms` from now (Redis's now)."""
        self._run(lambda p: self._schedule_in(p, self.keys.sweep(), [(job_id, in_ms)]))

    def schedule(self, key: str, job_id: str, at_ms: int | None) -> None:
        """Set when `job_id` is next due in the schedule `key` (None: take it off the schedule)."""
        with redis_errors():
            if at_ms is None:
                self.redis.zrem(key, job_id)
            else:
                self.redis.zadd(key, {job_id: at_ms})
