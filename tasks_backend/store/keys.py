"""Every Redis key the product writes is built here, from one prefix.

Per-job keys share the hash tag `{<id>}` so that one job lives in one Redis Cluster slot; an owner's
index and idempotency records share the tag `{o:<owner digest>}`. Scripts never mix the two groups.
Every key gets a TTL: per-job keys expire at the job's `createdAt + ttlMs`; indexes at the TTL ceiling.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


def _digest(value: str, size: int = 16) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[: size * 2]


@dataclass(frozen=True)
class Keys:
    prefix: str

    # -- one job -------------------------------------------------------------
    def job(self, job_id: str) -> str:
        return f"{self.prefix}:{{{job_id}}}:job"

    def events(self, job_id: str) -> str:
        return f"{self.prefix}:{{{job_id}}}:events"

    def steps(self, job_id: str) -> str:
        return f"{self.prefix}:{{{job_id}}}:steps"

    def answers(self, job_id: str) -> str:
        return f"{self.prefix}:{{{job_id}}}:answers"

    def push_configs(self, job_id: str) -> str:
        """Push subscriptions of one job (hash: subscription id -> JSON, in the shape of the adapter that made it)."""
        return f"{self.prefix}:{{{job_id}}}:push"

    def push_cursors(self, job_id: str) -> str:
        """Per subscription, the last event delivered and the retry state (hash: subscription id -> JSON)."""
        return f"{self.prefix}:{{{job_id}}}:pushpos"

    def push_lock(self, job_id: str) -> str:
        """Held by the one worker delivering a job's notifications (a random token, short TTL)."""
        return f"{self.prefix}:{{{job_id}}}:pushlock"

    def job_meta(self, job_id: str) -> str:
        """Opaque strings adapters keep beside the job (hash: adapter-prefixed name -> value; `job_meta`)."""
        return f"{self.prefix}:{{{job_id}}}:meta"

    def job_keys(self, job_id: str) -> list[str]:
        """All keys of one job, in the order the Lua scripts expect them."""
        return [self.job(job_id), self.events(job_id), self.steps(job_id), self.answers(job_id)]

    # -- one owner -----------------------------------------------------------
    def owner_tag(self, owner: str) -> str:
        return f"{self.prefix}:{{o:{_digest(owner, 12)}}}"

    def owner_index(self, owner: str) -> str:
        return f"{self.owner_tag(owner)}:jobs"

    def idempotency(self, owner: str, key: str) -> str:
        return f"{self.owner_tag(owner)}:idem:{_digest(key)}"

    # -- limits (tasks_backend.access.limits) ----------------------------------------
    def rate(self, owner: str) -> str:
        """The principal's request-rate state (hash: theoretical arrival time, last request's answer)."""
        return f"{self.owner_tag(owner)}:rate"

    def active_jobs(self, owner: str) -> str:
        """Ids of the principal's jobs that were unfinished at the last prune of its count (set)."""
        return f"{self.owner_tag(owner)}:active"

    def active_mark(self, owner: str) -> str:
        """The owner-index score up to which the last prune read (jobs indexed after it count as unfinished)."""
        return f"{self.owner_tag(owner)}:activemark"

    def streams(self, owner: str) -> str:
        """The principal's open streams (sorted set: stream id -> lease expiry, ms)."""
        return f"{self.owner_tag(owner)}:streams"

    def auth_failures(self, address: str) -> str:
        """Failed authentications from one client address in the current window (hash). Read by the per-request
        limits in the same round trip as the owner-tagged limit keys, but by a script of its own (pipelined),
        since the address and the owner hash to different Redis Cluster slots."""
        return f"{self.prefix}:{{a:{_digest(address, 12)}}}:authfail"

    # -- global --------------------------------------------------------------
    def sweep(self) -> str:
        """Jobs the sweeper must look at, scored by when (ms)."""
        return f"{self.prefix}:sweep"

    def push_due(self) -> str:
        """Jobs with push subscriptions whose feed a worker must look at, scored by when (ms)."""
        return f"{self.prefix}:push:due"

    def queue_pushes(self, queue: str) -> str:
        """How many job messages were ever pushed to the broker list `queue` (a counter, in the broker's
        Redis, next to the list; see `RedisDispatcher`)."""
        return f"{self.prefix}:pushes:{queue}"

    def operations(self) -> str:
        """The operations the workers run, as they last published them (hash: name -> publish time and entry;
        see `catalog`): what an application that submits without the job code checks params against."""
        return f"{self.prefix}:operations"

    def lock(self, name: str) -> str:
        return f"{self.prefix}:lock:{name}"

    def stats(self, name: str) -> str:
        """Job metrics that workers and sweepers write and every web process reports."""
        return f"{self.prefix}:stats:{name}"

    def pattern(self) -> str:
        return f"{self.prefix}:*"
