"""Reading the job indexes a listing pages through: an owner's jobs and a parent's children.

Rule: part of the job store (`RedisStore` lists through `IndexPages`); each index is a sorted set of job ids scored
by creation time, read newest first from a (score, id) cursor.
"""

from __future__ import annotations

from collections.abc import Sequence

from .connect import redis_errors
from .part import StorePart


class IndexPages(StorePart):
    """The listing side of the job store."""

    def owner_page(self, owner: str, before: tuple[float, str] | None, count: int) -> list[tuple[str, float]]:
        """Up to `count` (id, index score) of an owner's jobs, newest first, strictly after the cursor."""
        return self.index_page(self.keys.owner_index(owner), before, count)

    def children_page(self, parent_id: str, before: tuple[float, str] | None,
                      count: int) -> list[tuple[str, float]]:
        """The same for a parent's children (`Waits.index_child`)."""
        return self.index_page(self.keys.children(parent_id), before, count)

    def index_page(self, key: str, before: tuple[float, str] | None, count: int) -> list[tuple[str, float]]:
        top = "+inf" if before is None else repr(before[0])
        with redis_errors():
            rows = self.redis.zrevrangebyscore(key, top, "-inf", start=0, num=count + 64, withscores=True)
        out: list[tuple[str, float]] = []
        for member, score in rows:
            entry = (str(member), float(score))
            if before is not None and (entry[1], entry[0]) >= (before[0], before[1]):
                continue
            out.append(entry)
            if len(out) == count:
                break
        return out

    def owner_count(self, owner: str) -> int:
        """How many jobs an owner's index holds (O(1)); entries of expired jobs stay until a listing passes them."""
        with redis_errors():
            return int(self.redis.zcard(self.keys.owner_index(owner)))

    def forget_for_owner(self, owner: str, job_ids: Sequence[str]) -> None:
        if job_ids:
            with redis_errors():
                self.redis.zrem(self.keys.owner_index(owner), *job_ids)
