"""Schedules in Redis: each a hash under its owner's tag, the owner's list of them, the jobs each made, and
the due set the ticker reads (see `scripts/schedules/`).

Rule: the schedule hash is the truth; the due set only says when to look, and a definition never leaves a
schedule without a due entry, whenever its process dies. On a single Redis a definition or a resume writes both in
one script. On a Cluster (the due set in a slot of its own) a definition adds the entry, if there is none, before it
writes the hash, and moves it after. The ticker always decides from the hash, so an entry early, late or left behind
is moved on or dropped by its next look.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any

from ..model.schedules import Schedule, ScheduleSpec
from .connect import redis_errors
from .jobs import RedisStore
from .runner import new_request_id

#: Every field of a schedule hash, and what it holds (Python names them only here; scripts in Redis).
FIELDS = {
    "body": "the definition as given (canonical JSON of `ScheduleSpec.wire`), what a repeated create compares",
    "owner": "the principal that owns it (and its jobs)",
    "gen": "random, new each time the name is defined: part of each tick's idempotency key",
    "anchor": "where `everySeconds` ticks count from, Redis ms (the creation)",
    "next": "the next tick, Redis ms",
    "paused": "'1' while paused",
    "pending": "ticks claimed whose jobs may not all be made yet (comma-separated ms)",
    "last": "the last tick that made a job, Redis ms",
    "lastjob": "the id of that job",
    "created": "when it was defined, Redis ms",
    "updated": "its last change, Redis ms",
    "rq": "the last request that changed it and its reply ('<request id> <reply>'): a replay answers it",
}
#: How long a delete's request id is kept, for a replay of that delete to answer as the delete did (ms).
DELETED_MS = 60_000
#: The field of a job hash that names the schedule that made it (see `store.fields`).
JOB_FIELD = "sched"


def member(owner: str, name: str) -> str:
    """A schedule's entry in the due set (names hold no newline; see `model.schedules.NAME`)."""
    return f"{name}\n{owner}"


def parse_member(value: str) -> tuple[str, str]:
    """(owner, name) of a due-set entry."""
    name, _, owner = value.partition("\n")
    return owner, name


def _schedule(raw: dict[str, str]) -> Schedule | None:
    if not raw.get("body") or not raw.get("next"):
        return None
    body = json.loads(raw["body"])
    spec = ScheduleSpec(name=body["name"], operation=body["operation"], params=body.get("params") or {},
                        cron=body.get("cron"), every_s=body.get("everySeconds"), timezone=body["timezone"],
                        catch_up=body["catchUp"], priority=body["priority"])
    pending = tuple(int(t) for t in (raw.get("pending") or "").split(",") if t)
    return Schedule(spec=spec, owner=raw["owner"], generation=raw["gen"], anchor_ms=int(raw["anchor"]),
                    next_ms=int(raw["next"]), paused=raw.get("paused") == "1",
                    last_ms=int(raw["last"]) if raw.get("last") else None, last_job_id=raw.get("lastjob") or None,
                    pending=pending)


#: (when a ticker first took a schedule for its current run, the end of a lease on it that lapsed), Redis ms.
Held = tuple[int, int]


def body_of(spec: ScheduleSpec) -> str:
    return json.dumps(spec.wire(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class ScheduleStore:
    """The schedules beside the jobs; runs its scripts through the job store's runner."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.redis: Any = store.redis
        self.keys = store.keys
        self.scripts = store.scripts
        self.ttl_ms = store.max_ttl_ms

    def now_ms(self) -> int:
        """Redis's clock, in ms."""
        with redis_errors():
            seconds, micros = self.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000

    # -- define, read, change ------------------------------------------------------------------------
    def put(self, owner: str, spec: ScheduleSpec, *, generation: str, anchor_ms: int, next_ms: int,
            replace: bool = False, most: int = 0, declared: bool = False) -> tuple[str, int | None]:
        """Define a schedule: (created | replaced | same | conflict | limit, its next run), with its due entry.
        `most`: a new name is refused ('limit') while the owner has that many schedules, not counting those
        `declared` in code (0: no limit)."""
        pairs = ["owner", owner, "gen", generation, "anchor", anchor_ms, "next", next_ms, "paused", "0",
                 "pending", ""]
        rid = new_request_id()

        due_keys, due_member = self._due_in_script(owner, spec.name)

        def call() -> tuple[str, Any]:
            reply = self.scripts.call("schedules.put", [self.keys.schedule(owner, spec.name),
                                                        self.keys.schedules(owner),
                                                        self.keys.schedules_declared(owner), *due_keys],
                                      spec.name, body_of(spec), "1" if replace else "", self.ttl_ms, most, rid,
                                      "1" if declared else "", due_member, *pairs)
            outcome = str(reply[0])
            if outcome == "limit" and self.prune(owner):  # names of schedules that expired no longer count
                return call()
            return outcome, reply[1]

        if due_keys:
            outcome, at = call()
            return outcome, None if outcome == "limit" else int(at)
        # A Cluster: the entry first (the hash is the truth: an entry without one is dropped by the next look).
        added = self._due(owner, spec.name, next_ms, only_new=True)
        try:
            outcome, at = call()
        except Exception:
            if added:
                self._look_now(owner, spec.name)
            raise
        if outcome == "limit":
            if added:
                self._look_now(owner, spec.name)
            return outcome, None
        # An entry this call added was put at this request's next run: a schedule already there ('same',
        # 'conflict') had lost its own, which goes back to the hash's next run.
        if outcome != "conflict" or added:
            self._due(owner, spec.name, int(at), only_new=outcome in ("same", "conflict") and not added)
        return outcome, int(at)

    def _look_now(self, owner: str, name: str) -> None:
        """An entry on a Cluster that may be no schedule's now (a definition added it first and was not written, or
        the schedule was deleted) is left for the next look (which drops it, or moves it on to the run of a schedule
        of that name another request wrote meanwhile) rather than removed: removing it could take that other
        schedule's entry. Best effort: a failure leaves it at its time."""
        with contextlib.suppress(Exception), redis_errors():
            self.redis.zadd(self.keys.schedules_due(), {member(owner, name): 0}, xx=True)

    def _due_in_script(self, owner: str, name: str) -> tuple[list[str], str]:
        """The due set's keys and the schedule's member, for a script that writes its due entry with the schedule:
        on a single Redis, where a process that dies between two calls would leave a schedule that never ticks;
        none on a Cluster, where the due set is in another slot."""
        if not self.store.single:
            return [], ""
        return [self.keys.schedules_due(), self.keys.schedules_taken()], member(owner, name)

    def prune(self, owner: str) -> int:
        """Drop from the owner's list the names whose schedule is gone (expired); how many were dropped."""
        names = self.names(owner)
        gone = [n for n, s in zip(names, self.get_many([(owner, n) for n in names]), strict=True) if s is None]
        if gone:
            with redis_errors():
                self.redis.zrem(self.keys.schedules(owner), *gone)
        return len(gone)

    def _due(self, owner: str, name: str, at_ms: int, *, only_new: bool = False) -> bool:
        """A schedule's due entry written apart from the schedule (a Cluster's way, see the module's rule):
        whether it was added. `only_new`: an entry already there stays."""
        return bool(self.scripts.call("schedules.due", [self.keys.schedules_due(), self.keys.schedules_taken()],
                                      member(owner, name), at_ms, "1" if only_new else "", self.ttl_ms))

    def get(self, owner: str, name: str) -> Schedule | None:
        with redis_errors():
            raw = self.redis.hgetall(self.keys.schedule(owner, name))
        found = _schedule(raw) if raw else None
        return found if found is not None and found.owner == owner else None

    def get_many(self, pairs: Sequence[tuple[str, str]]) -> list[Schedule | None]:
        """Each (owner, name)'s schedule (None: gone), in one round trip."""
        if not pairs:
            return []
        with redis_errors():
            pipe = self.redis.pipeline(transaction=False)
            for owner, name in pairs:
                pipe.hgetall(self.keys.schedule(owner, name))
            rows = pipe.execute()
        out: list[Schedule | None] = []
        for (owner, _), raw in zip(pairs, rows, strict=True):
            found = _schedule(raw) if raw else None
            out.append(found if found is not None and found.owner == owner else None)
        return out

    def names(self, owner: str) -> list[str]:
        with redis_errors():
            return [str(n) for n in self.redis.zrange(self.keys.schedules(owner), 0, -1)]

    def names_page(self, owner: str, after: tuple[float, str] | None, count: int) -> list[tuple[str, float]]:
        """Up to `count` (name, creation ms) of the owner's schedules, oldest first, strictly after `after`."""
        low = "-inf" if after is None else repr(after[0])
        with redis_errors():
            rows = self.redis.zrangebyscore(self.keys.schedules(owner), low, "+inf", start=0, num=count + 64,
                                            withscores=True)
        out = [(str(m), float(s)) for m, s in rows if after is None or (float(s), str(m)) > after]
        return out[:count]

    def set_paused(self, owner: str, name: str, paused: bool, next_ms: int | None = None) -> bool:
        """Pause or resume (resuming moves the next run to `next_ms`); False if there is no such schedule."""
        due_keys, due_member = self._due_in_script(owner, name)
        at = self.scripts.call("schedules.state", [self.keys.schedule(owner, name), *due_keys],
                               "1" if paused else "0", "" if next_ms is None else next_ms, self.ttl_ms, due_member)
        if at is None:
            return False
        if next_ms is not None and not due_keys:
            self._due(owner, name, int(at))
        return True

    def delete(self, owner: str, name: str) -> bool:
        due_keys, due_member = self._due_in_script(owner, name)
        existed = self.scripts.call("schedules.delete", [self.keys.schedule(owner, name), self.keys.schedules(owner),
                                                         self.keys.schedule_jobs(owner, name),
                                                         self.keys.schedule_deleted(owner, name),
                                                         self.keys.schedules_declared(owner), *due_keys],
                                    name, self.ttl_ms, new_request_id(), DELETED_MS, due_member)
        if existed and not due_keys:
            self._look_now(owner, name)
        return bool(existed)

    def jobs_page(self, owner: str, name: str, before: tuple[float, str] | None,
                  count: int) -> list[tuple[str, float]]:
        """Up to `count` (job id, tick) of the jobs a schedule made, newest first, strictly after the cursor."""
        top = "+inf" if before is None else repr(before[0])
        with redis_errors():
            rows = self.redis.zrevrangebyscore(self.keys.schedule_jobs(owner, name), top, "-inf", start=0,
                                               num=count + 64, withscores=True)
        out = [(str(m), float(s)) for m, s in rows if before is None or (float(s), str(m)) < before]
        return out[:count]

    def forget_jobs(self, owner: str, name: str, job_ids: Sequence[str]) -> None:
        if job_ids:
            with redis_errors():
                self.redis.zrem(self.keys.schedule_jobs(owner, name), *job_ids)

    # -- the ticker's side ---------------------------------------------------------------------------
    def take_due(self, limit: int, lease_ms: int) -> tuple[int, int | None, dict[tuple[str, str], Held | None]]:
        """(Redis now, the earliest entry left or None, up to `limit` schedules due now, each taken for `lease_ms`:
        (owner, name) -> (when a ticker first took it for this run, the end of the lease that lapsed) if another
        taking of it lapsed, else None)."""
        rid = new_request_id()
        reply = self.scripts.call("schedules.take", [self.keys.schedules_due(), self.keys.schedules_taken(),
                                                     self.keys.schedules_take_reply(rid)],
                                  limit, lease_ms, self.ttl_ms)
        now, first = int(reply[0]), (int(float(reply[1])) if reply[1] else None)
        rows = reply[2:]
        taken: dict[tuple[str, str], Held | None] = {}
        for i in range(0, len(rows), 3):
            since, lapsed = rows[i + 1], rows[i + 2]
            taken[parse_member(str(rows[i]))] = (int(since), int(lapsed)) if lapsed else None
        return now, first, taken

    def claim_many(self, claims: Sequence[tuple[Schedule, list[int], int]]) -> list[bool]:
        """Move each schedule on to its next run with its ticks pending, if it is still as read (one round trip)."""
        rids = [new_request_id() for _ in claims]

        def build(p: Any) -> None:
            for (s, ticks, next_ms), rid in zip(claims, rids, strict=True):
                self.scripts.queue(p, "schedules.claim", [self.keys.schedule(s.owner, s.name),
                                                          self.keys.schedules(s.owner),
                                                          self.keys.schedules_declared(s.owner)],
                                   s.generation, s.next_ms, "1" if s.paused else "0", next_ms,
                                   ",".join(map(str, ticks)), self.ttl_ms, rid)

        return [r == "ok" for r in self.scripts.run(build)] if claims else []

    def finish_many(self, done: Sequence[tuple[Schedule, Sequence[int], Sequence[tuple[str, int]]]]
                    ) -> list[int | None]:
        """Record the (job id, tick) of the jobs made for each schedule's pending ticks (a tick let go has none)
        and write each one's job hash's schedule name; the next run of each, or None where the schedule changed
        meanwhile (one round trip)."""
        rids = [new_request_id() for _ in done]

        def build(p: Any) -> None:
            for (s, ticks, jobs), rid in zip(done, rids, strict=True):
                for job_id, _ in jobs:
                    self.scripts.queue(p, "schedules.mark_job", [self.keys.job(job_id)], s.name)
                pairs = [x for job_id, tick in jobs for x in (job_id, tick)]
                self.scripts.queue(p, "schedules.finish", [self.keys.schedule(s.owner, s.name),
                                                           self.keys.schedule_jobs(s.owner, s.name)],
                                   s.generation, ",".join(map(str, ticks)), self.ttl_ms, rid, *pairs)

        if not done:
            return []
        replies = iter(self.scripts.run(build))
        out: list[int | None] = []
        for _, _, jobs in done:
            for _ in jobs:
                next(replies)
            reply = next(replies)
            out.append(None if reply == "changed" else int(reply))
        return out

    def settle(self, entries: Sequence[tuple[str, str, int, int | None]]) -> None:
        """Set each (owner, name, leased score, next run or None to drop) due entry, unless it was written
        again since it was taken (then the newer entry stands). One command."""
        if entries:
            args = [x for owner, name, seen, at in entries
                    for x in (member(owner, name), seen, "" if at is None else at)]
            self.scripts.call("reschedule", [self.keys.schedules_due(), self.keys.schedules_taken()], *args)

