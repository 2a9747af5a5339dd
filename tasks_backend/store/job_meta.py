"""Opaque strings an adapter keeps beside a job, such as the conversation id a protocol's client chose.

The core never reads them: each adapter names its own fields (prefixed with its name, so two adapters
never clash) and gives them meaning. One hash per job, expiring with the job (`createdAt + ttlMs`).
"""

from __future__ import annotations

from ..model.domain import JobRecord
from .connect import redis_errors
from .jobs import RedisStore

#: Longest value kept; adapters refuse longer input themselves, this only bounds what is stored.
MAX_VALUE = 4096


class JobMeta:
    def __init__(self, store: RedisStore) -> None:
        self.redis = store.redis
        self.keys = store.keys

    def put(self, record: JobRecord, name: str, value: str) -> None:
        """Set one field of the job's metadata; it expires with the job."""
        key = self.keys.job_meta(record.id)
        with redis_errors():
            pipe = self.redis.pipeline(transaction=True)
            pipe.hset(key, name, value[:MAX_VALUE])
            pipe.pexpireat(key, record.expires_ms)
            pipe.execute()

    def get_many(self, job_ids: list[str], name: str) -> dict[str, str | None]:
        """One field of several jobs' metadata (None where a job has none), in one round trip."""
        if not job_ids:
            return {}
        with redis_errors():
            pipe = self.redis.pipeline(transaction=False)
            for job_id in job_ids:
                pipe.hget(self.keys.job_meta(job_id), name)
            values = pipe.execute()
        return {j: v if isinstance(v, str) else None for j, v in zip(job_ids, values, strict=True)}

    def get_all(self, job_id: str) -> dict[str, str]:
        with redis_errors():
            raw = self.redis.hgetall(self.keys.job_meta(job_id))
        return {str(k): str(v) for k, v in raw.items()}
