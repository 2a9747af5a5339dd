"""Active jobs per principal: a new job is refused while the owner has `max_active_jobs` jobs not yet terminal.

Nothing is written when a job is created or finishes: the owner index the store keeps already lists every job. The
count is the jobs known unfinished at the last prune plus those indexed after its mark (the rate script counts it
in the same round trip as a request's admission); when it reaches the limit, a prune reads the states of those jobs
and moves the mark, so finished jobs stop counting without a hook in the finish path. A job indexed with a score
below the mark after a concurrent prune read past it goes uncounted: the limit is soft by a few jobs.
"""

from __future__ import annotations

import math
from typing import Any

import redis

from ..config import Settings
from ..errors import QuotaExceeded
from ..model.domain import TERMINAL_STATES
from ..store.connect import redis_errors
from ..store.jobs import job_states
from ..store.keys import Keys
from ..store.runner import ScriptRunner

#: Jobs a prune reads past its mark at once (a first prune of a principal with a long history takes several).
PRUNE_BATCH = 5000


def active_keys(keys: Keys, owner: str) -> list[str]:
    """The keys the count reads, in the order the scripts take them: unfinished set, prune mark, owner index."""
    return [keys.active_jobs(owner), keys.active_mark(owner), keys.owner_index(owner)]


class ActiveJobs:
    def __init__(self, client: redis.Redis, scripts: ScriptRunner, keys: Keys, settings: Settings) -> None:
        self.client, self.scripts, self.keys, self.settings = client, scripts, keys, settings

    def check(self, owner: str, counted: int | None = None) -> int | None:
        """Refuse a new job when `owner` has `max_active_jobs` jobs not yet terminal.

        `counted` is the count a request's admission just read, if any (else it is read now). Returns the owner's
        unfinished jobs before this one, or None when there is no limit; raises `QuotaExceeded` at the limit."""
        limit = self.settings.max_active_jobs
        if limit <= 0:
            return None
        count = counted
        if count is None:  # without an admission (the in-process API), one read
            count = int(self.scripts.call("limits.count", active_keys(self.keys, owner)))
        if count >= limit:
            count = self.prune(owner)
        if count >= limit:
            raise QuotaExceeded(f"This principal has {count} unfinished jobs; at most {limit} are allowed.",
                                retry_after_s=max(1, math.ceil(self.settings.default_poll_s)))
        return count

    def prune(self, owner: str) -> int:
        """Keep only the unfinished of the owner's counted jobs, move the mark; how many remain counted."""
        unfinished_key, mark_key, index_key = active_keys(self.keys, owner)
        ttl_ms = int(self.settings.max_ttl_s * 1000)
        r: Any = self.client  # decode_responses=True: every reply is str
        with redis_errors():
            mark = r.get(mark_key)
            known = set(r.smembers(unfinished_key))
            fresh = r.zrangebyscore(index_key, f"({mark}" if mark else "-inf", "+inf", start=0, num=PRUNE_BATCH,
                                    withscores=True)
            ids = sorted(known | {member for member, _ in fresh})
            states = dict(zip(ids, job_states(r, self.keys, ids), strict=True))
            alive = [i for i in ids if states[i] is not None and states[i] not in TERMINAL_STATES]
            pipe = r.pipeline(transaction=False)
            done = [i for i in known if i not in alive]
            if done:
                pipe.srem(unfinished_key, *done)
            if alive:
                pipe.sadd(unfinished_key, *alive)
            pipe.pexpire(unfinished_key, ttl_ms)
            left = 0
            if fresh:
                last = repr(float(fresh[-1][1]))
                pipe.set(mark_key, last, px=ttl_ms)
                pipe.zcount(index_key, f"({last}", "+inf")
                left = int(pipe.execute()[-1])
            else:
                pipe.execute()
        return len(alive) + left
