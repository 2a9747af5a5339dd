"""The dispatch gate's side of the job store: the scripts under `scripts/gate/` (see `scripts/lib/gate.lua`).

Rule: part of the job store (`RedisStore` reaches the gate through `AdmissionStore`); every gate key is under
one hash tag per broker queue (`{gate:<queue>}`), so each script runs in one Redis Cluster slot.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .connect import redis_errors
from .keys import GATE_PARTS
from .outcomes import Moved
from .part import StorePart

#: (released job id, its message or operation) pairs, for the caller to publish.
Released = list[tuple[str, str]]


@dataclass(frozen=True)
class GateCall:
    """What every gate script takes first: the worker slots assumed while none are published,
    whether fair shares are on, the keys' TTL; and the broker queue and its push counter (with the counter's TTL to
    renew, '' to leave it, and the bypass list, `Keys.bypass_queue`, with its push counter) when the broker is the
    store's Redis, so that releases are pushed in the script."""

    fallback_slots: int
    fair: bool
    ttl_ms: int
    #: The gate's keys (`Keys.gate_keys`: one gate per broker queue).
    keys: tuple[str, ...]
    push: tuple[str, str, str, str, str] | None = None

    def head(self) -> list[Any]:
        return [self.fallback_slots, "1" if self.fair else "0", self.ttl_ms,
                self.push[2] if self.push else ""]

    def all_keys(self) -> list[str]:
        return [*self.keys, *self.push_keys()]

    def push_keys(self) -> list[str]:
        """The broker queue, its push counter, its bypass list and that list's push counter, when the gate pushes
        (else none)."""
        return [self.push[0], self.push[1], self.push[3], self.push[4]] if self.push else []

    def key(self, part: str) -> str:
        return self.keys[GATE_PARTS.index(part)]


@dataclass(frozen=True)
class GateEntry:
    """A new job for the gate, in its submit's round trip: what the gate keeps of it (`entry`), and its delay (ms
    from now, or '@' and an absolute Redis time)."""

    call: GateCall
    info: str
    delay: str


@dataclass
class GateLeave:
    """A run's end, leaving the gate in its last transition (`RedisStore.transition`): whether the gate forgets the
    job (finished) or keeps what it knew (parked); `lone`: try `gate/finish_bypassed.lua` first (the job was likely
    sent past the gate, as the last run's here was). After the move, `taken` says the transition carried it (else
    the caller leaves apart), `released` holds what the leave let in, and `bypassed` whether the job was sent past
    the gate (None: not known, a replay)."""

    call: GateCall
    final: bool
    lone: bool = False
    taken: bool = False
    released: Released = field(default_factory=list)
    bypassed: bool | None = None


def entry(owner: str, priority: int, message: str, concurrency: str = "", max_: int = 0) -> str:
    """A new job's entry in the gate (`scripts/lib/gate.lua`): its owner and concurrency value as the gate names them
    (`Keys.gate_owner`, `Keys.gate_concurrency`), its priority, and its message or operation."""
    return f"h|{priority}|{max_}||{owner}|{concurrency}|{message}"


def pairs(flat: Sequence[Any]) -> Released:
    return [(str(flat[i]), str(flat[i + 1])) for i in range(0, len(flat) - 1, 2)]


def finish_reply(reply: Sequence[Any]) -> tuple[Moved, str, int, Released, bool | None]:
    """`gate.finish`'s reply (transition.lua's, then where the job was and the released pairs when the move was made
    now) as (outcome, state before, time, released, whether the job was sent past the gate: None when not known)."""
    was = str(reply[3]) if len(reply) > 3 else None
    return Moved(reply[0]), str(reply[1]), int(reply[2]), pairs(reply[4:]), None if was is None else was == "b"

class AdmissionStore(StorePart):
    """The gate's scripts."""

    def gate_admit(self, call: GateCall, job_id: str, info: str, delay: str, *, leave_first: bool = False,
                   claimed_ms: int | None = None, message: str = "") -> tuple[bool, Released]:
        """Make a job runnable (info '': what the gate kept of it, and `message` its message or operation, which
        the gate keeps only while a job waits): (whether the gate knew the job, released). `leave_first`: a run
        that ends goes back (a retry, a hand-back), claimed at `claimed_ms` (Redis ms, where the gate and the job
        share a clock): a replay finds the job let in again since, and changes nothing."""
        leave = "0" if not leave_first else "1" if claimed_ms is None else f"@{claimed_ms}"
        reply = self.scripts.call("gate.admit", call.all_keys(), *call.head(), job_id, info, delay, leave, message)
        return bool(int(reply[0])), pairs(reply[1:])

    def gate_leave(self, call: GateCall, job_ids: Sequence[str], *, final: bool, waiting: bool = False,
                   seen_ms: int | None = None) -> Released:
        """Jobs whose runs ended leave flight; the room they made is filled. `final`: the gate forgets them.
        `waiting` (with `final`): only those that wait; one sent to a worker leaves at its run's end. `seen_ms`
        (not `final`; Redis ms by the gate's own clock): when the caller saw them parked; one admitted again since
        stays where that admission put it."""
        if not job_ids:
            return []
        mode = ("w" if waiting else "1") if final else "0" if seen_ms is None else f"0@{seen_ms}"
        return pairs(self.scripts.call("gate.leave", call.all_keys(), *call.head(), mode, *job_ids))

    def gate_finish(self, call: GateCall, job_id: str, args: Sequence[Any], *,
                    final: bool) -> tuple[Moved, str, int, Released, bool | None]:
        """A run's last transition (`args`: transition.lua's ARGV) and the job's leave from flight in one script, on
        a single Redis: (outcome, state before, Redis time of the change or 0, released, whether the job was sent
        past the gate)."""
        keys, argv = self.gate_finish_args(call, job_id, args, final=final)
        return finish_reply(self.scripts.call("gate.finish", keys, *argv))

    def gate_finish_bypassed(self, call: GateCall, job_id: str, args: Sequence[Any]) -> tuple[Moved, str, int] | None:
        """A finished run's last transition when its job was sent past the gate, which then only forgets it
        (`gate/finish_bypassed.lua`): (outcome, state before, Redis time of the change or 0), or None, nothing done,
        for any other job (`gate_finish` ends it: the gate holds more for it, or knows it no longer, a replay)."""
        reply = self.scripts.call("gate.finish_bypassed", [*self.keys.job_keys(job_id), call.key("jobs")], job_id,
                                  *args)
        if reply[0] == "gate":
            return None
        return Moved(reply[0]), str(reply[1]), int(reply[2])

    def gate_finish_args(self, call: GateCall, job_id: str, args: Sequence[Any], *,
                         final: bool) -> tuple[list[str], list[Any]]:
        """The keys and the ARGV of `gate.finish` (also for a caller that queues it in a pipeline of its own)."""
        return [*self.keys.job_keys(job_id), *call.all_keys()], [*call.head(), "1" if final else "0", job_id, *args]

    def gate_tick(self, call: GateCall, worker: str = "", slots: int = 0,
                  slots_ttl_ms: int = 0) -> tuple[int, int | None, Released]:
        """Publish a worker's slots (0: it stops) and pump: (Redis now, next delayed job's due time, released)."""
        reply = self.scripts.call("gate.tick", call.all_keys(), *call.head(), worker, slots, slots_ttl_ms)
        return int(reply[0]), (int(float(reply[1])) if reply[1] not in ("", None) else None), pairs(reply[2:])

    def gate_where(self, call: GateCall, job_ids: Sequence[str]) -> list[tuple[str | None, float | None]]:
        """Each job's place in the gate (h held, d delayed, f in flight, b sent past the gate to the broker, x out;
        None: unknown) and, in flight, since when (Redis ms). One round trip."""
        if not job_ids:
            return []
        with redis_errors():
            pipe = self.redis.pipeline(transaction=False)
            pipe.hmget(call.key("jobs"), list(job_ids))
            for job_id in job_ids:
                pipe.zscore(call.key("flight"), job_id)
            infos, *scores = pipe.execute()
        return [(i[0] if i else None, None if s is None else float(s)) for i, s in zip(infos, scores,
                                                                                                     strict=True)]

    def gate_scan(self, call: GateCall, cursor: int, count: int = 200) -> tuple[int, list[tuple[str, str]]]:
        """A step through every job the gate knows: (next cursor, 0 when done; (job id, where) pairs)."""
        with redis_errors():
            cursor, found = self.redis.hscan(call.key("jobs"), cursor, count=count)
        return int(cursor), [(str(k), str(v)[0]) for k, v in found.items()]

    def gate_in_flight(self, call: GateCall, before_ms: int, limit: int = 1000, start: int = 0) -> list[str]:
        """Jobs in flight since before `before_ms` (Redis ms), the longest first: `limit` of them from the
        `start`th."""
        with redis_errors():
            return [str(x) for x in self.redis.zrangebyscore(call.key("flight"), "-inf", before_ms,
                                                             start=start, num=limit)]

    def gate_figures(self, call: GateCall, now_ms: int, oldest: int = 100) -> GateFigures:
        """What `/metrics` reports of the gate, in one round trip: every figure a count kept by the gate's own
        sorted sets, plus the `oldest` longest in flight (the caller tells a waiting one from a running one)."""
        with redis_errors():
            pipe = self.redis.pipeline(transaction=False)
            for part in ("ready", "delayed", "flight"):
                pipe.zcard(call.key(part))
            pipe.zrangebyscore(call.key("workers"), now_ms, "+inf")
            pipe.hgetall(call.key("slots"))
            pipe.zrange(call.key("flight"), 0, oldest - 1, withscores=True)
            if call.push:
                pipe.lindex(call.push[3], -1)
            held, delayed, flight, workers, slots, first, *bypass_head = pipe.execute()
        live = [str(w) for w in workers]
        return GateFigures(int(held), int(delayed), int(flight), len(live),
                           sum(int(slots.get(w) or 0) for w in live), [(str(j), int(s)) for j, s in first],
                           message_job(bypass_head[0]) if bypass_head and bypass_head[0] else None)


@dataclass(frozen=True)
class GateFigures:
    """Jobs held (waiting for room: a worker slot or their concurrency value), delayed (waiting for their time)
    and in flight (sent to the broker, not finished); workers whose published slots still count, and their slots;
    the longest in flight, oldest first, with when each was sent (Redis ms); the job of the oldest message in the
    bypass list (a lone owner's jobs sent past the gate at their submit), if any."""

    held: int
    delayed: int
    in_flight: int
    workers: int
    slots: int
    oldest_in_flight: list[tuple[str, int]]
    oldest_bypassed: str | None = None


def message_job(message: str) -> str | None:
    """The job id a broker message (`RedisDispatcher.message`) carries, or None for anything else."""
    try:
        return str(json.loads(message)["properties"]["correlation_id"])
    except (ValueError, KeyError, TypeError):
        return None
