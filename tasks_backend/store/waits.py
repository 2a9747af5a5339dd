"""Waiting jobs: a long sleep's time, a parent's children, and the schedule `running.waking` reads.

Rule: part of the job store (`RedisStore` parks and wakes through `Waits`). A parent and its children are
different jobs in different Cluster slots: no script here touches two jobs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..model.domain import JobState
from .admission import GateLeave, finish_reply
from .connect import redis_errors
from .fields import LAST_STEP, OPERATION, PARENT, STATE, TOKEN, Change
from .finished import FinishedRecords
from .outcomes import Moved, Woken
from .part import StorePart
from .runner import new_request_id


@dataclass(frozen=True)
class Waiting:
    """What a waiting job waits for, as the waker reads it."""

    state: JobState
    token: int
    operation: str
    wake_ms: int | None
    children: list[str]


class Waits(StorePart):
    """The waiting side of the job store."""

    gate_finish_args: Callable[..., tuple[list[str], list[Any]]]  # AdmissionStore's
    finished: FinishedRecords  # RedisStore's

    def now_ms(self) -> int:
        """Redis's clock, in ms: the one clock every process compares times by."""
        with redis_errors():
            seconds, micros = self.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def time_left_ms(self, job_id: str) -> int | None:
        """How long the job has left before it expires, by Redis's clock (None: gone, or kept without an end). Read
        afresh: a rerun that takes a running child over lengthens its life (`adopt`)."""
        with redis_errors():
            left = int(self.redis.pttl(self.keys.job(job_id)))
        return left if left >= 0 else None

    def parent_of(self, job_id: str) -> str | None:
        """The job's parent as it stands now: the job whose spawn made it, or the rerun that took it over since."""
        with redis_errors():
            parent = self.redis.hget(self.keys.job(job_id), PARENT)
        return parent if isinstance(parent, str) and parent else None

    def park(self, job_id: str, token: int, change: Change, *, look_in_ms: int,
             request_id: str | None = None, leave: GateLeave | None = None) -> tuple[Moved, int]:
        """Move a running job to `suspended` (fenced by `token`), writing `change`; the wake schedule gets the job
        `look_in_ms` from now in the same round trip, before the move, so a waiting job always has an entry.
        `leave` (a single Redis): the run leaves the dispatch gate in the move's script, as `transition`'s does, so
        that a wake right after the move finds the job out of flight. Returns (outcome, Redis time of the move or
        0)."""
        args = [request_id or new_request_id(), token, JobState.SUSPENDED.value, JobState.RUNNING.value, "",
                *change.pairs()]

        def build(p: Any) -> None:
            self._schedule_in(p, self.keys.wake(), [(job_id, max(0, look_in_ms))])
            if leave is None:
                self._eval(p, "transition", self.keys.job_keys(job_id), *args)
            else:
                keys, argv = self.gate_finish_args(leave.call, job_id, args, final=leave.final)
                self._eval(p, "gate.finish", keys, *argv)

        outcome, _, at, released, bypassed = finish_reply(self._run(build, in_order=True)[1])
        if leave is not None:
            leave.taken, leave.released, leave.bypassed = True, released, bypassed
        return outcome, at

    def wake(self, job_id: str, token: int | None, message: str, *, sweep_in_ms: int,
             request_id: str | None = None) -> tuple[Woken, int]:
        """Move a waiting job back to `queued` (see `scripts/wake.lua`): (outcome, a sleeper's time when early).
        The sweep entry is written in the same round trip, before the move."""
        rid = request_id or new_request_id()

        def build(p: Any) -> None:
            self._schedule_in(p, self.keys.sweep(), [(job_id, sweep_in_ms)])
            self._eval(p, "wake", self.keys.job_keys(job_id), rid, "" if token is None else token, message)

        outcome, when = self._run(build, in_order=True)[1]
        return Woken(outcome), int(when)

    def waiting_of(self, job_id: str) -> Waiting | None:
        """What the job waits for (None: gone)."""
        with redis_errors():
            state, token, op, wake, kids = self.redis.hmget(self.keys.job(job_id), [STATE, TOKEN, OPERATION, "wake",
                                                                                    "kids"])
        if state is None:
            return None
        return Waiting(JobState(state), int(token or 0), str(op), int(wake) if wake else None,
                       json.loads(kids) if kids else [])

    def due_to_wake(self, limit: int) -> tuple[int, list[tuple[str, str]]]:
        """(Redis's time now, up to `limit` (job id, score) entries of the wake schedule due by then)."""
        reply = self.scripts.call("due", [self.keys.wake()], limit)
        return int(reply[0]), [(str(reply[i]), str(reply[i + 1])) for i in range(1, len(reply), 2)]

    def settle_wakes(self, entries: Sequence[tuple[str, str, int | None]]) -> None:
        """Set each (job id, score seen, next look in Redis ms or None to drop) entry of the wake schedule,
        unless it was written again since it was read (then the newer entry stands)."""
        if entries:
            args = [x for job_id, seen, at in entries for x in (job_id, seen, "" if at is None else at)]
            self.scripts.call("reschedule", [self.keys.wake()], *args)

    def index_child(self, parent_id: str, child_id: str) -> tuple[JobState, int] | None:
        """Add a child to its parent's index (kept as long as the parent); the parent's state as the child was
        added and when the parent ends (Redis ms), None if the parent is gone."""
        reply = self.scripts.call("child_index", [self.keys.job(parent_id), self.keys.children(parent_id)], child_id)
        return (JobState(reply[0]), int(reply[1])) if reply else None

    def adopt(self, child_id: str, until_ms: int, *, taken_from: str = "", taker: str = "") -> bool | None:
        """Keep the child (every key that ends with it) until at least `until_ms` (Redis ms), within the longest
        retention from its creation; with `taken_from` and `taker`, make `taker` its parent if its parent is still
        `taken_from` (or `taker` already). Whether it is the taker's; None if it is gone. The caller adds it to the
        taker's index (`index_child`)."""
        mine = self.scripts.call("adopt", self.keys.lifetime_keys(child_id), taken_from, taker, until_ms,
                                 self.max_ttl_ms)
        if mine is not None:
            self.finished.forget(child_id)  # a finished record kept here may have another parent or retention now
        return None if mine is None else bool(mine)

    def last_step(self, job_id: str) -> str | None:
        """The name of the step the job recorded last (None: none since it was made)."""
        with redis_errors():
            name = self.redis.hget(self.keys.job(job_id), LAST_STEP)
        return name if isinstance(name, str) else None

    def child_ids(self, parent_id: str) -> list[str]:
        """Every child of the job, in the order spawned."""
        with redis_errors():
            return [str(m) for m in self.redis.zrange(self.keys.children(parent_id), 0, -1)]
