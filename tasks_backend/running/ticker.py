"""The ticker: makes each schedule's jobs, one per tick, however many tickers run and whenever they die.

A pass takes the due schedules (each leased for a few seconds, so that two tickers seldom look at one), decides
their ticks on Redis's clock (`model.schedules.plan`), and moves each on with a compare-and-set on what it read,
the ticks marked pending. Then it makes a job per pending tick, with an idempotency key of (schedule, generation,
tick) under the owner, and clears them. A ticker killed between the two steps leaves the ticks pending; the next
pass makes the same jobs again, which the keys turn into the jobs already made: none twice, none lost. One that
dies before its compare-and-set leaves its lease; whoever takes the schedule when it lapses is told when it was
first taken, so the ticks seen in time then are not missed (`plan`'s `held`). It sleeps until the earliest due
entry, at most `max_wait_s`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import BadRequest
from ..model.schedules import Schedule, plan
from ..store.schedules import Held, ScheduleStore
from .loops import repeat

log = logging.getLogger(__name__)

#: Makes the job of one tick of a schedule (idempotently: the same tick gives the same job); its id.
Fire = Callable[[Schedule, int], str]
#: How long a tick whose job is refused as the caller's mistake is tried again before it is let go: a rolling deploy
#: (a sweeper that does not know a new operation yet) is over by then; an operation removed for good is not.
LET_GO_AFTER_MS = 600_000


@dataclass
class Pass:
    """What one pass did."""

    now_ms: int = 0
    #: The earliest due entry left after the pass (Redis ms), None if there is none.
    next_due_ms: int | None = None
    jobs: int = 0
    looked: int = 0
    failed: list[str] = field(default_factory=list)


class Ticker:
    def __init__(self, store: ScheduleStore, fire: Fire, *, batch: int = 500, lease_ms: int = 5000,
                 max_wait_s: float = 0.5, let_go_after_ms: int = LET_GO_AFTER_MS) -> None:
        self.store, self.fire, self.batch, self.lease_ms = store, fire, batch, lease_ms
        self.max_wait_s, self.let_go_after_ms = max_wait_s, let_go_after_ms

    def tick_once(self, max_rounds: int = 100) -> Pass:
        """Handle every schedule due now (by Redis's clock), `batch` at a time."""
        done = Pass()
        for _ in range(max_rounds):
            now, first, taken = self.store.take_due(self.batch, self.lease_ms)
            done.now_ms, done.next_due_ms = now, first
            if not taken:
                break
            done.looked += len(taken)
            self._handle(now, taken, done)
            if len(taken) < self.batch:
                break
        return done

    def _handle(self, now: int, taken: dict[tuple[str, str], Held | None], done: Pass) -> None:
        leased = now + self.lease_ms
        settle: list[tuple[str, str, int, int | None]] = []
        work: list[tuple[Schedule, tuple[int, ...]]] = []
        claims: list[tuple[Schedule, list[int], int]] = []
        for (owner, name), schedule in zip(taken, self.store.get_many(list(taken)), strict=True):
            if schedule is None:
                settle.append((owner, name, leased, None))  # deleted: its entry goes
            elif schedule.pending:
                work.append((schedule, schedule.pending))  # a pass died before making these: finish them
            else:
                try:
                    ticks, next_ms = plan(schedule.spec, schedule.next_ms, now, schedule.anchor_ms,
                                          paused=schedule.paused, held=taken[owner, name])
                except Exception as exc:  # say a time zone this host lacks: left taken, the lease lapses, and a pass
                    # (on a host that has it, or once this one does) tries again; the other schedules go on
                    log.error("schedule %r of %r: its ticks cannot be worked out here (%s)", name, owner, exc)
                    done.failed.append(name)
                    continue
                claims.append((schedule, ticks, next_ms))
        for (schedule, ticks, next_ms), ok in zip(claims, self.store.claim_many(claims), strict=True):
            if ok and ticks:
                work.append((schedule, tuple(ticks)))
            elif ok:
                settle.append((schedule.owner, schedule.name, leased, next_ms))
            # else: changed since read (another ticker, a pause, a new definition); its writer set its entry
        made: list[tuple[Schedule, tuple[int, ...], list[tuple[str, int]]]] = []
        for schedule, pending in work:
            try:
                made.append((schedule, pending, self._fire_all(schedule, pending, now)))
            except Exception as exc:  # left pending: the entry's lease lapses and a pass tries again
                log.warning("schedule %r of %r: job not made (%s)", schedule.name, schedule.owner, exc)
                done.failed.append(schedule.name)
        for (schedule, _, jobs), following in zip(made, self.store.finish_many(made), strict=True):
            done.jobs += len(jobs)
            if following is not None:
                settle.append((schedule.owner, schedule.name, leased, following))
        self.store.settle(settle)
        if settle:
            done.next_due_ms = min([t for *_, t in settle if t is not None] + [done.next_due_ms or 2**62])

    def _fire_all(self, schedule: Schedule, pending: tuple[int, ...], now_ms: int) -> list[tuple[str, int]]:
        """(job id, tick) of each pending tick's job. A tick whose job is refused as the caller's mistake (the
        operation unknown here, the schedule's params no longer passing its checks) is tried again at each pass
        until `let_go_after_ms` after it, then let go, so that the schedule goes on to its next ticks; any other
        failure raises, and the ticks stay pending for the next pass."""
        jobs = []
        for tick in pending:
            try:
                jobs.append((self.fire(schedule, tick), tick))
            except BadRequest as exc:
                if now_ms - tick < self.let_go_after_ms:
                    raise
                log.error("schedule %r of %r: the tick of %d gets no job, and the schedule goes on: %s",
                          schedule.name, schedule.owner, tick, exc)
        return jobs

    def wait_s(self, last: Pass) -> float:
        """How long to sleep after a pass: until the earliest due entry, at most `max_wait_s` (a schedule
        defined meanwhile may be due sooner)."""
        if last.next_due_ms is None:
            return self.max_wait_s
        return min(max((last.next_due_ms - last.now_ms) / 1000, 0.0), self.max_wait_s)

    def run_forever(self, stop: threading.Event) -> None:
        repeat(stop, lambda: self.wait_s(self.tick_once()), every_s=self.max_wait_s, name="tick", logger=log)
