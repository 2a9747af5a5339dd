"""The remote-task schedule: jobs waiting on other agents' tasks, and when to look at each remote next.

Rule: part of the job store (`RedisStore` schedules through `RemoteWatch`). Members are job ids; which remote
tasks a job waits on is read from its recorded steps (`remote:N` without `remote:N:done`), so a job that
waits on several remotes in turn has one entry.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from .connect import redis_errors
from .keys import Keys
from .runner import ScriptRunner

#: The prefix of the steps that hold remote tasks' references, and the suffix of their outcomes.
REMOTE_STEP, DONE = "remote:", ":done"


class RemoteWatch:
    redis: Any
    keys: Keys
    scripts: ScriptRunner
    _run: Callable[..., list[Any]]
    _schedule_in: Callable[[Any, str, Sequence[tuple[str, int]]], None]

    def watch_remote(self, job_id: str, in_ms: int) -> None:
        """Look at the job's remote tasks `in_ms` from now (Redis time), whatever was scheduled before."""
        self._run(lambda p: self._schedule_in(p, self.keys.remote_due(), [(job_id, max(0, in_ms))]))

    def due_remotes(self, limit: int) -> tuple[int, list[tuple[str, str]]]:
        """(Redis's time now, up to `limit` (job id, score) entries due by then)."""
        reply = self.scripts.call("due", [self.keys.remote_due()], limit)
        return int(reply[0]), [(str(reply[i]), str(reply[i + 1])) for i in range(1, len(reply), 2)]

    def settle_remotes(self, entries: Sequence[tuple[str, str, int | None]]) -> None:
        """Set each (job id, score seen, next look in Redis ms or None to drop) entry, unless written since."""
        if entries:
            args = [x for job_id, seen, at in entries for x in (job_id, seen, "" if at is None else at)]
            self.scripts.call("reschedule", [self.keys.remote_due()], *args)

    def open_remotes(self, job_id: str) -> list[tuple[str, dict[str, Any]]]:
        """(step name, reference) of each remote task the job created and has not recorded the end of."""
        with redis_errors():
            steps = self.redis.hgetall(self.keys.steps(job_id))
        names = [n for n in steps if n.startswith(REMOTE_STEP) and not n.endswith(DONE)]
        return [(n, json.loads(steps[n])) for n in sorted(names) if n + DONE not in steps]
