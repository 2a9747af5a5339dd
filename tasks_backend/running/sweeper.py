"""The sweeper: the safety net under at-least-once delivery.

It republishes jobs stuck in `queued` (a publish that was lost, or a message lost in the broker's
fetch window; not jobs whose message waits behind others, see `sweep_one.lua`), requeues jobs whose
worker died (lease lapsed) and fails jobs that used up their attempts. Jobs past their TTL simply
expire in Redis; a worker still running one finds it gone at its next write and stops. Every decision
is one Lua script on Redis's clock, so any number of sweepers may run at once, whatever their own
clocks say; a short lock only saves them from duplicate work. An entry is moved or dropped only if
nobody wrote it since the sweeper read it (an answer may have queued the job meanwhile).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..config import Settings
from ..errors import DispatchUnavailable, ServiceUnavailable, TasksBackendError
from ..model.timing import Timing
from ..store.jobs import RedisStore
from ..store.outcomes import Swept
from .admission import DispatchGate
from .dispatch import AmqpDispatcher, Dispatcher
from .rabbitmq import DeadLetters
from .stats import JobStats

log = logging.getLogger(__name__)


class Sweeper:
    def __init__(self, store: RedisStore, dispatcher: Dispatcher, settings: Settings, batch: int = 1000,
                 lookup: Callable[[str], Any] | None = None) -> None:
        """`lookup`: an operation's spec (its concurrency limit), for a job the gate never admitted (`_admit`)."""
        self.store, self.dispatcher, self.settings, self.batch = store, dispatcher, settings, batch
        self.admission = DispatchGate(store, dispatcher, settings)
        self.lookup = lookup

    def sweep_once(self, max_rounds: int = 1000) -> dict[str, int]:
        """Look at every job that is due now (by Redis's clock), `batch` jobs per round trip.

        A pass drains the schedule: with thousands of running jobs, each must be seen once per lease
        period, and a pass that stopped at a fixed count would let leases lapse unseen."""
        counts: dict[str, int] = {}
        interval_ms = int(self.settings.sweep_interval_s * 1000)
        if not self.store.try_lock("sweep", max(interval_ms // 2, 100)):
            return counts
        self.admission.prune()
        if isinstance(self.dispatcher, AmqpDispatcher):
            self._fail_dead_letters(self.dispatcher.dead_letters, counts)
        seen: set[str] = set()
        for _ in range(max_rounds):
            now, due = self.store.due_for_sweep(self.batch)
            fresh = [(job_id, score) for job_id, score in due if job_id not in seen]
            if not fresh:
                break
            seen.update(job_id for job_id, _ in fresh)
            self._sweep(now, fresh, counts, interval_ms)
            if len(due) < self.batch:
                break
        JobStats(self.store).sweeper_actions(counts)
        if counts:
            log.info("sweep: %s", counts)
        return counts

    def _sweep(self, now: int, due: list[tuple[str, str]], counts: dict[str, int], interval_ms: int) -> None:
        try:
            backlog, bypass_backlog = self.dispatcher.backlog(), self.dispatcher.bypass_backlog()
        except DispatchUnavailable:
            backlog = bypass_backlog = None
        # Held and delayed jobs wait their turn (no message of theirs is lost); a job just released gets the grace.
        grace_ms = int(self.settings.queued_grace_s * 1000)
        waiting: list[tuple[str, str, int | None]] = []
        kept: list[tuple[str, str]] = []
        places = self.store.gate_where(self.admission.call(), [j for j, _ in due])
        out_of_gate = {job_id for (job_id, _), (where, _) in zip(due, places, strict=True) if where == "x"}
        bypassed = {job_id for (job_id, _), (where, _) in zip(due, places, strict=True) if where == "b"}
        unknown = {job_id for (job_id, _), (where, _) in zip(due, places, strict=True) if where is None}
        for (job_id, score), (where, since) in zip(due, places, strict=True):
            if where in ("h", "d"):
                waiting.append((job_id, score, now + 2 * grace_ms))
            elif where == "f" and since is not None and since + grace_ms > now:
                waiting.append((job_id, score, int(since) + grace_ms))
            else:
                kept.append((job_id, score))
        if waiting:
            counts["waiting"] = counts.get("waiting", 0) + len(waiting)
            self.store.settle_sweep(waiting)
        if not (due := kept):
            return
        # A job sent past the gate waits in the bypass list, read after the queue's own: it is counted against that
        # list's pushes (the two lists together are not first in, first out).
        replies = {**self._look([j for j, _ in due if j not in bypassed], backlog, bypassed=False),
                   **self._look([j for j, _ in due if j in bypassed], bypass_backlog, bypassed=True)}
        settled: list[tuple[str, str, int | None]] = []
        for job_id, score in due:
            swept, when, operation = replies[job_id]
            action = "orphan" if swept is Swept.REPUBLISH and self._orphan(job_id) else swept.value
            counts[action] = counts.get(action, 0) + 1
            if action == Swept.REPUBLISH and job_id in out_of_gate:
                # Parked, then queued again by a process that died or lost Redis before it admitted the job: it goes
                # through the gate as that admission would have (its slot and concurrency value counted), not
                # straight to the broker.
                self.admission.resume(job_id, operation)
            elif action == Swept.REPUBLISH and job_id in bypassed:
                # Sent past the gate: it comes back through the gate, where its new message is counted.
                self.admission.readmit(job_id, operation)
            elif action == Swept.REPUBLISH and job_id in unknown and self._admit(job_id):
                pass
            elif action == Swept.REPUBLISH:
                try:
                    self.dispatcher.publish(job_id, operation)
                except DispatchUnavailable:
                    when = now + interval_ms
            settled.append((job_id, score, when if action in (Swept.REPUBLISH, Swept.LATER) else None))
        self.store.settle_sweep(settled)

    def _look(self, job_ids: list[str], backlog: tuple[int, int] | None, *,
              bypassed: bool) -> dict[str, tuple[Swept, int, str]]:
        replies = self.store.sweep_many(
            job_ids, grace_ms=int(self.settings.queued_grace_s * 1000), max_attempts=self.settings.max_attempts,
            backlog=backlog, bypassed=bypassed,
            abandoned_error={"message": f"Gave up after {self.settings.max_attempts} attempts: the worker "
                                        "running it was lost each time.", "type": "WorkerLost"})
        return dict(zip(job_ids, replies, strict=True))

    def _fail_dead_letters(self, dead_letters: DeadLetters, counts: dict[str, int]) -> None:
        """RabbitMQ dead-letters a message past its delivery limit; its job is failed here (see `rabbitmq`)."""
        try:
            taken = dead_letters.fail_all(self.store)
        except Exception as exc:  # the broker unreachable: the dead letters wait in their queue
            log.warning("dead letters not read: %s", type(exc).__name__)
            return
        if taken:
            counts["dead_lettered"] = taken

    def _admit(self, job_id: str) -> bool:
        """A queued job the gate does not know, which by its record goes through the gate (fair shares on, a start
        time, a concurrency limit), is admitted as its submit would have admitted it: on a Redis Cluster the submit
        admits in a call of its own after the job is made, and a process that died between the two left it
        unadmitted. Published as it is, it would start before its time and count against no slot or value.
        Returns False when it needs no admission (or this process cannot tell its operation's limit): the caller
        publishes it."""
        record = self.store.get(job_id)
        if record is None or self.lookup is None:
            return False
        try:
            spec = self.lookup(record.operation)
        except TasksBackendError:
            log.warning("job %s not admitted to the gate: its operation %r is unknown here", job_id,
                        record.operation)
            return False
        timing = Timing(run_at_ms=record.run_at_ms, priority=record.priority)
        entry = self.admission.entry(job_id, record.owner, record.operation, spec, record.params, timing)
        if entry is None:
            return False
        self.admission.admit(job_id, entry)
        return True

    def _orphan(self, job_id: str) -> bool:
        """A job written by a submit that then lost its idempotency race, and whose submitter died
        before removing it: nobody holds its handle, and running it would run the request twice."""
        record = self.store.get(job_id)
        if record is None or record.idempotency_key is None:
            return False
        holder = self.store.idempotency_value(record.owner, record.idempotency_key)
        if holder is not None and holder.startswith(record.id):
            return False
        self.store.discard(job_id)
        return True

    def run_forever(self, stop: threading.Event) -> None:
        """Sweep every `sweep_interval_s`; between sweeps, pump the dispatch gate whenever a delayed job is due."""
        next_sweep = 0.0
        while not stop.is_set():
            wait = self.settings.sweep_interval_s
            try:
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + self.settings.sweep_interval_s
                    self.sweep_once()
                wait = min(self.admission.tick(), max(0.0, next_sweep - time.monotonic()))
            except ServiceUnavailable:
                log.warning("sweep skipped: Redis or the broker is unreachable")
            except Exception:
                log.exception("sweep failed")
            stop.wait(wait)
