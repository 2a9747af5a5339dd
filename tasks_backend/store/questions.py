"""Questions addressed to people: who was asked (an index per addressee) and one-time answer links.

Rule: part of the job store (`RedisStore` inherits it). An index entry is only a pointer: readers check the job
itself (its state and open requests), so an entry outliving its question is harmless and expires at the TTL
ceiling. A link is kept by the digest of its token only; the token itself is never stored or logged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .connect import redis_errors
from .part import StorePart
from .runner import new_request_id


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class LinkUse:
    """What using an answer link gave: `outcome` ok | used | expired | gone, and for ok what it answers."""

    outcome: str
    job_id: str = ""
    key: str = ""
    link_id: str = ""


class QuestionIndex(StorePart):
    """The question side of the job store."""

    now_ms: Callable[[], int]  # `Waits`

    def note_asked(self, job_id: str, addressees: Sequence[str], at_ms: int) -> None:
        """Add the job to each addressee's index ("principal:NAME" / "role:NAME"); applied twice, the same."""
        if not addressees:
            return
        with redis_errors():
            pipe = self.redis.pipeline(transaction=False)
            for addressee in addressees:
                key = self.keys.questions_for(addressee)
                pipe.zadd(key, {job_id: at_ms}, nx=True)
                pipe.pexpire(key, self.max_ttl_ms)
            pipe.execute()

    def asked_of(self, addressees: Sequence[str], limit: int = 500) -> list[str]:
        """The jobs that asked any of `addressees`, newest first, each once."""
        with redis_errors():
            pipe = self.redis.pipeline(transaction=False)
            for addressee in addressees:
                pipe.zrevrange(self.keys.questions_for(addressee), 0, limit - 1, withscores=True)
            rows = [(str(m), float(s)) for part in pipe.execute() for m, s in part]
        seen: dict[str, float] = {}
        for member, score in rows:
            seen[member] = max(score, seen.get(member, 0.0))
        return sorted(seen, key=lambda m: -seen[m])[:limit]

    def was_asked(self, job_id: str, addressees: Sequence[str]) -> bool:
        with redis_errors():
            pipe = self.redis.pipeline(transaction=False)
            for addressee in addressees:
                pipe.zscore(self.keys.questions_for(addressee), job_id)
            return any(s is not None for s in pipe.execute())

    def forget_asked(self, job_id: str, addressees: Sequence[str]) -> None:
        """Drop a gone job from the indexes it was read from."""
        with redis_errors():
            pipe = self.redis.pipeline(transaction=False)
            for addressee in addressees:
                pipe.zrem(self.keys.questions_for(addressee), job_id)
            pipe.execute()

    # -- one-time links ------------------------------------------------------------------------
    def put_link(self, job_id: str, key: str, token: str, link_id: str, until_ms: int) -> None:
        """Store a link (by its token's digest) to answer `key` of the job until `until_ms` (Redis ms); a link made
        before for the same question stops working."""
        digest = token_digest(token)
        pointer = self.keys.answer_link_of(job_id, key)
        with redis_errors():
            old = self.redis.get(pointer)
            pipe = self.redis.pipeline(transaction=False)
            if old:
                pipe.delete(self.keys.answer_link(str(old)))
            link = self.keys.answer_link(digest)
            pipe.hset(link, mapping={"job": job_id, "key": key, "id": link_id, "until": until_ms})
            pipe.pexpireat(link, until_ms)
            pipe.set(pointer, digest, pxat=until_ms)
            pipe.execute()

    def revoke_link(self, job_id: str, key: str) -> bool:
        """Stop the question's link from working; False if it had none."""
        pointer = self.keys.answer_link_of(job_id, key)
        with redis_errors():
            digest = self.redis.get(pointer)
            if not digest:
                return False
            pipe = self.redis.pipeline(transaction=False)  # two slots: two commands
            pipe.delete(self.keys.answer_link(str(digest)))
            pipe.delete(pointer)
            pipe.execute()
        return True

    def peek_link(self, token: str) -> LinkUse:
        """What the link would answer, without taking it (for showing its form)."""
        with redis_errors():
            h = self.redis.hmget(self.keys.answer_link(token_digest(token)), ["job", "key", "id", "until", "used"])
        if not h[0]:
            return LinkUse("gone")
        if h[4]:
            return LinkUse("used")
        if int(h[3]) <= self.now_ms():
            return LinkUse("expired")
        return LinkUse("ok", str(h[0]), str(h[1]), str(h[2]))

    def use_link(self, token: str, request_id: str | None = None) -> LinkUse:
        """Take the link for one answer (see `scripts/questions/link_use.lua`)."""
        reply = self.scripts.call("questions.link_use", [self.keys.answer_link(token_digest(token))],
                                  request_id or new_request_id())
        return LinkUse(*(str(x) for x in reply))

    def release_link(self, token: str) -> None:
        """Give a taken link back (its answer was refused as not matching the form: the person may try again)."""
        with redis_errors():
            self.redis.hdel(self.keys.answer_link(token_digest(token)), "used")
