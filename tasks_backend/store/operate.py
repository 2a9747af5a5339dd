"""What operators' reads and reruns need of the store: every owner's index, a job's recorded steps, and
copying steps to a rerun before it exists.

Steps are copied with plain commands, not a script: the two jobs live under different hash tags (Redis Cluster
slots). The original is finished, so its steps no longer change while they are read.
"""

from __future__ import annotations

from collections.abc import Mapping

from .connect import redis_errors
from .part import StorePart


class OperateStore(StorePart):
    def owner_indexes(self) -> list[str]:
        """The index key of every owner that has one: SCAN over the keyspace (every node of a Cluster), O(keys).
        Only operators' and admins' listings across owners pay it."""
        with redis_errors():
            return sorted({str(k) for k in self.redis.scan_iter(match=self.keys.owner_index_pattern(), count=1000)})

    def schedule_index(self, owner: str, name: str) -> str:
        """The key of the jobs a schedule made (for a listing filtered by schedule)."""
        return self.keys.schedule_jobs(owner, name)

    def children_index(self, parent_id: str) -> str:
        return self.keys.children(parent_id)

    def owner_index_key(self, owner: str) -> str:
        return self.keys.owner_index(owner)

    def recorded_steps(self, job_id: str) -> dict[str, str]:
        """Every step a job recorded (name -> JSON value); a finished job that failed or was cancelled keeps them
        until it expires."""
        with redis_errors():
            raw = self.redis.hgetall(self.keys.steps(job_id))
        return {str(k): str(v) for k, v in (raw or {}).items()}

    def copy_steps(self, job_id: str, steps: Mapping[str, str], ttl_ms: int) -> None:
        """Write `steps` as the recorded steps of the job `job_id` is about to be (before it exists, so that no
        run of it can start without them), expiring within its TTL. Writing them twice writes the same."""
        if not steps:
            return
        key = self.keys.steps(job_id)
        with redis_errors():
            pipe = self.redis.pipeline(transaction=False)
            pipe.hset(key, mapping=dict(steps))
            pipe.pexpire(key, ttl_ms)
            pipe.execute()
