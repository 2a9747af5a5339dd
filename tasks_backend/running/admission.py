"""Admission: the one way a job becomes runnable, through the dispatch gate (`store/scripts/lib/gate.lua`).

Every path that makes a job runnable goes through here: a submit (`entry`, in the submit's own round trip on a
single Redis; `admit` after it on a Cluster), an answered question or a wake (`resume`), a retry or a hand-back
(`requeue`), a run that ended (`leaving`, in its last transition on a single Redis; `after_run` otherwise: held
jobs take the room it made), and the pump (`tick`: delayed jobs now due, a worker that starts). The gate holds a
job in Redis, before the broker, while as many jobs are in flight as the workers have slots (fair shares), until
its time (a delay), or while its concurrency value is full; it releases held jobs owner by owner in turn, each
owner's by priority, then submission order; both brokers see the same order. Rule: released jobs are published
here when the gate could not push them in its own script; a publish lost in a crash is the sweeper's to redo.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..config import Settings
from ..errors import DispatchUnavailable, StoreUnavailable, TasksBackendError
from ..model.domain import JobRecord, JobState
from ..model.timing import Timing
from ..store.admission import GateCall, GateEntry, GateLeave, Released
from ..store.admission import entry as gate_entry
from ..store.jobs import RedisStore
from ..store.outcomes import Claimed
from .dispatch import Dispatcher, RedisDispatcher, operation_in

log = logging.getLogger(__name__)

#: How long a worker's published slots count without being published again, and how often it publishes them.
SLOTS_TTL_S, SLOTS_EVERY_S = 30.0, 10.0
#: The longest a pump loop sleeps (a delayed job due sooner wakes it then).
TICK_MAX_S = 1.0
#: How many of the jobs in flight longest one prune looks at.
PRUNE_PAGE = 1000
#: Run outcomes after which the gate forgets the job, and after which it keeps what it knew (a later admission).
FINAL = frozenset({"completed", "failed", "cancelled", "missing", Claimed.TERMINAL, Claimed.EXHAUSTED})
#: Outcomes of a run that parked its job.
PARKED_BY_RUN = frozenset({JobState.INPUT_REQUIRED.value, JobState.SUSPENDED.value})


def concurrency_of(spec: Any, operation: str, params: dict[str, Any]) -> tuple[str, int] | None:
    """(the concurrency value, its max) of a job of `spec` with `params`, or None when the operation has no limit."""
    limit = getattr(spec, "concurrency", None)
    if limit is None:
        return None
    value = "" if limit.key is None else json.dumps(params.get(limit.key), sort_keys=True)
    return value, int(limit.max)


class DispatchGate:
    def __init__(self, store: RedisStore, dispatcher: Dispatcher, settings: Settings) -> None:
        self.store, self.dispatcher, self.settings = store, dispatcher, settings
        self.inline = isinstance(dispatcher, RedisDispatcher) and dispatcher.shares_store
        #: The dispatcher whose queue the gate's scripts push to, when they push (`inline`).
        self._pusher = dispatcher if isinstance(dispatcher, RedisDispatcher) and self.inline else None
        self._scan = 0  # where `prune` goes on through the gate's jobs
        self._flight_at = 0  # and through those in flight longest
        self._keys = tuple(store.keys.gate_keys(settings.queue))
        self._call: GateCall | None = None  # the call without a counter TTL to renew: the same every time
        #: Whether the last run to end here had been sent past the gate (a lone owner's bypass): the next run's end
        #: tries the short way first (`GateLeave.lone`). Only a guess: a wrong one costs one script call that does
        #: nothing.
        self.lone = self.inline

    def call(self) -> GateCall:
        pusher = self._pusher
        ttl = pusher.counter_ttl_due() if pusher is not None else None
        if ttl is None and self._call is not None:
            return self._call
        push = None
        if pusher is not None:
            push = (self.settings.queue, pusher.pushes_key, "" if ttl is None else str(ttl),
                    self.store.keys.bypass_queue(self.settings.queue), pusher.bypass_pushes_key)
        call = GateCall(self.settings.dispatch_slots, self.settings.fair_shares, self.store.max_ttl_ms,
                        self._keys, push)
        if ttl is None:
            self._call = call
        return call

    def entry(self, job_id: str, owner: str, operation: str, spec: Any, params: dict[str, Any],
              timing: Timing) -> GateEntry | None:
        """A new job's admission, to ride in its submit; None when it needs none (fair shares off, no delay, no
        concurrency limit: the message goes straight to the broker)."""
        limit = concurrency_of(spec, operation, params)
        delay = (f"@{timing.run_at_ms}" if timing.run_at_ms is not None else str(timing.delay_ms or 0))
        if not self.settings.fair_shares and limit is None and delay in ("0", "@0"):
            return None
        keys = self.store.keys
        conc, most = ("", 0) if limit is None else (keys.gate_concurrency(operation, limit[0]), limit[1])
        info = gate_entry(keys.gate_owner(owner), timing.rank, self.message(job_id, operation), conc, most)
        return GateEntry(self.call(), info, delay)

    def message(self, job_id: str, operation: str) -> str:
        """What the gate publishes for a job: its broker message when it pushes it itself, else its operation."""
        return operation if self._pusher is None else self._pusher.message(job_id, operation)

    # -- the paths that make a job runnable --------------------------------------------------------
    def admit(self, job_id: str, entry: GateEntry) -> None:
        """A new job, admitted after its submit's round trip (a Redis Cluster)."""
        _, released = self.store.gate_admit(entry.call, job_id, entry.info, entry.delay)
        self.publish(released)

    def resume(self, job_id: str, operation: str) -> None:
        """A job queued again after it waited (an answered question, a sleep's time, its children finished): held
        in its old place, or published as it is when the gate never knew it. Unpublished (the broker or Redis
        down), it is left to the sweep entry its move to `queued` wrote."""
        try:
            known, released = self.store.gate_admit(self.call(), job_id, "", "0",
                                                    message=self.message(job_id, operation))
        except StoreUnavailable:
            log.warning("job %s resumed but not admitted: the sweeper publishes it", job_id)
            return
        self.publish(released)
        if known:
            return
        try:
            self.dispatcher.publish(job_id, operation)
        except DispatchUnavailable:
            with contextlib.suppress(StoreUnavailable):
                self.store.schedule_sweep(job_id, 0)

    def readmit(self, job_id: str, operation: str) -> None:
        """A job sent past the gate (a lone owner's bypass, `lib/gate_bypass.lua`) that the sweeper republishes (its
        message lost, or its run's worker): it leaves the bypass and is admitted again, so that its new message counts
        against the queue's own list, where the sweeper then looks for it, and its run against the slots. Not
        admitted (Redis down), it stays as it was, and the sweeper looks again."""
        try:
            _, released = self.store.gate_admit(self.call(), job_id, "", "0", leave_first=True,
                                                message=self.message(job_id, operation))
        except StoreUnavailable:
            log.warning("job %s not admitted again: the sweeper looks at it again", job_id)
            return
        self.publish(released)

    def requeue(self, record: JobRecord, delay_s: float = 0.0) -> None:
        """A run that goes back to the queue (a retry after `delay_s`, a hand-back) leaves flight and is admitted
        again. Raises `DispatchUnavailable` when it could not be passed on (its sweep entry covers it)."""
        try:
            # On a single Redis the gate and the job share a clock: the claim's time tells a replay of this call
            # (the job let in again since) from the first.
            known, released = self.store.gate_admit(
                self.call(), record.id, "", str(int(delay_s * 1000)), leave_first=True,
                claimed_ms=record.updated_ms if self.store.single else None,
                message=self.message(record.id, record.operation))
        except StoreUnavailable as exc:
            raise DispatchUnavailable() from exc
        self.publish(released)
        if not known:
            self.dispatcher.publish(record.id, record.operation, delay_s or None)

    def after_run(self, job_id: str, outcome: str, record: JobRecord | None = None,
                  lookup: Callable[[str], Any] | None = None) -> None:
        """A worker is done with a job (or refused to start it): it leaves flight, and held jobs take its room.
        With fair shares off, a job that had neither a time nor a concurrency limit never entered the gate.

        A message claimed while its job is parked (`Claimed.PARKED`, a stale duplicate) leaves nothing: an answer
        or a wake may have admitted the job again since the claim looked, and a leave would take that admission
        out of flight, its run then counted against no slot. The run that parked left flight itself; if that leave
        was lost, `prune` finds the job."""
        if record is not None and lookup is not None and not self.entered(record, lookup):
            return
        if outcome in FINAL or outcome in PARKED_BY_RUN:
            self.leave([job_id], final=outcome in FINAL)
            if record is not None and outcome in PARKED_BY_RUN:
                self._admit_if_woken(record)

    def _admit_if_woken(self, record: JobRecord) -> None:
        """A run parked and left flight in a call of its own (a Redis Cluster): a wake between the two found the
        job still in flight and admitted nothing, so it is admitted now (applied after the wake's, it changes
        nothing)."""
        try:
            woken = self.store.states_of([record.id])[0] is JobState.QUEUED
        except StoreUnavailable:
            return  # its sweep entry covers it
        if woken:
            self.resume(record.id, record.operation)

    def entered(self, record: JobRecord, lookup: Callable[[str], Any]) -> bool:
        """Whether the job went through the gate: always with fair shares on, else when it had a time or a
        concurrency limit."""
        if self.settings.fair_shares or record.run_at_ms is not None:
            return True
        try:
            return getattr(lookup(record.operation), "concurrency", None) is not None
        except TasksBackendError:
            return False

    def leaving(self, record: JobRecord, target: str, lookup: Callable[[str], Any]) -> GateLeave | None:
        """The gate's leave to ride in a run's last transition (finished, or parked for input), on a single Redis;
        None when the leave, if any, is `after_run`'s (a Redis Cluster, a move that keeps the job in flight)."""
        ends = target in FINAL or target in PARKED_BY_RUN
        if not self.store.single or not ends or not self.entered(record, lookup):
            return None
        final = target in FINAL
        return GateLeave(self.call(), final=final, lone=final and self.lone and self.inline)

    def left(self, leave: GateLeave) -> None:
        """A run left the gate in its last transition: what the leave let in is published, and where its job was
        guides the next run's end here."""
        if leave.bypassed is not None:
            self.lone = leave.bypassed
        self.publish(leave.released)

    def leave(self, job_ids: Sequence[str], *, final: bool, waiting: bool = False, seen_ms: int | None = None) -> None:
        """The jobs leave the gate (see `store.gate_leave`); what that lets in is published."""
        try:
            self.publish(self.store.gate_leave(self.call(), job_ids, final=final, waiting=waiting, seen_ms=seen_ms))
        except StoreUnavailable:
            log.warning("jobs %s left flight unrecorded: the sweeper will find them", list(job_ids))

    def publish(self, released: Released) -> None:
        """Publish what the gate released and did not push itself. Each pair holds what the job's entry kept: its
        operation, or its broker message when a process whose gate pushes wrote it (the deployment's broker setting
        changed, or processes differ in it), or '' (dropped: the record names the operation)."""
        blank = [job_id for job_id, kept in released if not kept]
        named = dict(zip(blank, self.store.operations_of(blank), strict=True)) if blank else {}
        for job_id, kept in released:
            operation = named.get(job_id) if not kept else operation_in(kept)
            if operation is None:
                continue  # gone since: nothing to run
            try:
                self.dispatcher.publish(job_id, operation)
            except DispatchUnavailable:
                log.warning("job %s released but not published: the sweeper publishes it", job_id)

    # -- the pump ---------------------------------------------------------------------------------
    def tick(self, worker: str = "", slots: int = 0) -> float:
        """Pump (and publish a worker's slots); returns the seconds until the next delayed job is due (at most
        `TICK_MAX_S`)."""
        now, due, released = self.store.gate_tick(self.call(), worker, slots, int(SLOTS_TTL_S * 1000))
        self.publish(released)
        return TICK_MAX_S if due is None else min(TICK_MAX_S, max(0.005, (due - now) / 1000))

    def prune(self) -> int:
        """Jobs in flight for a while that no run will report on (gone, finished, or parked by a run whose leave
        was lost) leave flight. Returns how many.

        A parked job's leave names when its state was read (`now`, by the gate's clock, before the read): an
        answer or a wake that admitted it again after that keeps its place."""
        call = self.call()
        now, _, _ = self.store.gate_tick(call)
        # A page of those in flight longest, from where the last prune's page ended: thousands of long runs that
        # go on do not hide a lost one behind them.
        stale = self.store.gate_in_flight(call, now - int(2000 * self.settings.queued_grace_s), PRUNE_PAGE,
                                          self._flight_at)
        paged = len(stale)
        # And a step through the rest: a parked job that expires unanswered never reports back, nor does a job
        # sent past the gate (bypassed) whose run's leave was lost.
        self._scan, seen = self.store.gate_scan(call, self._scan)
        stale += [job_id for job_id, where in seen if where in ("x", "b")]
        out = {job_id for job_id, where in seen if where == "x"}  # parked and out of flight: nothing to leave
        states = self.store.states_of(stale)
        done = [j for j, s in zip(stale, states, strict=True) if s is None or s in (
            JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)]
        paused = [j for j, s in zip(stale, states, strict=True)
                  if s in (JobState.INPUT_REQUIRED, JobState.SUSPENDED) and j not in out]
        self.leave(done, final=True)
        self.leave(paused, final=False, seen_ms=now)
        # Those of the page that left moved the rest of the flight forward; a short page was the last one.
        leaving = {*done, *paused}
        left = sum(1 for job_id in stale[:paged] if job_id in leaving)
        self._flight_at = self._flight_at + paged - left if paged == PRUNE_PAGE else 0
        return len(done) + len(paused)

    def run_forever(self, stop: threading.Event, worker: str = "", slots: int = 0) -> None:
        """A worker's loop: publish its slots, pump when a delayed job is due (and at least every second), prune
        now and then; on stop, take its slots back."""
        last_slots = last_prune = -SLOTS_EVERY_S
        wait = 0.0
        while not stop.wait(wait):
            now = time.monotonic()
            publish = bool(worker) and now - last_slots >= SLOTS_EVERY_S
            try:
                wait = self.tick(worker if publish else "", slots)
                last_slots = now if publish else last_slots
                if now - last_prune >= SLOTS_EVERY_S:
                    last_prune = now
                    self.prune()
            except TasksBackendError:
                wait = TICK_MAX_S
            except Exception:
                log.exception("dispatch pump failed")
                wait = TICK_MAX_S
        if worker:
            with contextlib.suppress(TasksBackendError):
                self.tick(worker, 0)
