"""Remote tasks of jobs: each job's open ones, and the schedule of when to look at each remote next.

Rule: part of the job store (`RedisStore` keeps them through `RemoteWatch`). The schedule's members are job ids;
which remote tasks a job waits on is its `remote_tasks` hash (kept apart from its steps, which a finished job
drops, so that a cancelled job's remote task can still be cancelled).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from typing import Any

from .connect import redis_errors
from .part import StorePart

#: The suffix of the step that records how a remote task ended.
DONE = ":done"


class RemoteWatch(StorePart):
    def remember_remote(self, job_id: str, step: str, ref: dict[str, Any], look_in_ms: int) -> None:
        """Keep the reference of a remote task the job just created, and look at it `look_in_ms` from now."""
        def build(p: Any) -> None:
            self._eval(p, "remote_task", [self.keys.job(job_id), self.keys.remote_tasks(job_id)], step,
                       json.dumps(ref))
            self._schedule_in(p, self.keys.remote_due(), [(job_id, max(0, look_in_ms))])

        self._run(build)

    def forget_remote(self, job_id: str, step: str) -> None:
        """The remote task of `step` ended (and the job recorded how): nothing more to watch or cancel."""
        self.scripts.call("remote_task", [self.keys.job(job_id), self.keys.remote_tasks(job_id)], step, "")

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

    def remote_push_key(self) -> str:
        """The key push tokens are signed with: made once (the first writer wins), kept to the TTL ceiling."""
        key = self.keys.remote_push_key()
        with redis_errors():
            self.redis.set(key, secrets.token_hex(32), nx=True, px=self.max_ttl_ms)
            pipe = self.redis.pipeline(transaction=False)
            pipe.get(key)
            pipe.pexpire(key, self.max_ttl_ms)
            value, _ = pipe.execute()
        return str(value)

    def open_remotes(self, job_id: str) -> list[tuple[str, dict[str, Any]]]:
        """(step name, reference) of each remote task the job created and has not seen end, oldest first."""
        with redis_errors():
            found = self.redis.hgetall(self.keys.remote_tasks(job_id))
        return [(name, json.loads(found[name])) for name in sorted(found, key=_order)]


def _order(step: str) -> tuple[int, str]:
    number = step.rpartition(":")[2]
    return (int(number) if number.isdigit() else 0, step)
