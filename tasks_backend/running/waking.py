"""Waking waiting jobs: a long sleep's time came, or a parent's children finished.

`Waker.wake` is the one function that makes a parked job (`suspended`) runnable again; it and the answers that
resume a job asking for input (`JobService.provide_input`) both pass the job to the dispatch gate's `resume`.
A question's deadline is on the same schedule: `Waker.time_out_questions` answers what is overdue.
`Waker.wake_due` is the wake-at-time logic: it reads the wake schedule (`keys.wake`) a few times a second, in
every worker's main process and in every sweeper. A parent is woken by the child that finished last (the child
writes its end, then reads the parent; the parent writes its park, then reads its children: whichever comes
second sees the other), and, should that notice be lost with a process, by `wake_due`, which looks at a
waiting parent's children every `CHILDREN_CHECK_MS`.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

from ..config import Settings
from ..model.domain import JobState
from ..model.questions import TIMEOUT_ACTION, deadline_ms
from ..store.jobs import RedisStore
from ..store.outcomes import Answered, Woken
from .admission import DispatchGate
from .context import CHILDREN_CHECK_MS
from .dispatch import Dispatcher
from .loops import repeat

log = logging.getLogger(__name__)
#: How often `run_forever` looks for sleepers whose time came (seconds).
WAKE_INTERVAL_S = 0.2
#: The answer a passed deadline records (`ctx.ask` then answers `on_timeout`, or fails the job).
TIMED_OUT = json.dumps({"action": TIMEOUT_ACTION})


class Waker:
    def __init__(self, store: RedisStore, dispatcher: Dispatcher, settings: Settings, batch: int = 500,
                 audit: Callable[..., None] | None = None) -> None:
        self.store, self.dispatcher, self.settings, self.batch = store, dispatcher, settings, batch
        self.gate = DispatchGate(store, dispatcher, settings)
        #: Writes an audit entry (the service's `Audit.record`, wired by the runtime): a deadline's answer.
        self.audit = audit

    def wake(self, job_id: str, token: int | None, operation: str) -> Woken:
        """Make a waiting job runnable again: queue it (if it still waits, since the run that holds `token`
        parked it) and hand it to the workers. Waking early is harmless: the job replays and waits again."""
        outcome, _ = self.store.wake(job_id, token, "Resuming.",
                                     sweep_in_ms=int(1000 * self.settings.queued_grace_s))
        if outcome is Woken.QUEUED:
            self.gate.resume(job_id, operation)
        return outcome

    def children_done(self, ids: list[str]) -> bool:
        return all(s is None or s in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)
                   for s in self.store.states_of(ids))

    def check_parent(self, parent_id: str) -> bool:
        """Wake the parent if it waits for children and all of them are finished (after a child finished, or
        right after the parent parked). True if it was woken."""
        waiting = self.store.waiting_of(parent_id)
        if waiting is None or waiting.state is not JobState.SUSPENDED or not waiting.children:
            return False
        if not self.children_done(waiting.children):
            return False
        return self.wake(parent_id, waiting.token, waiting.operation) is Woken.QUEUED

    def wake_due(self) -> int:
        """Look at every job the wake schedule says is due now (Redis's clock): wake a sleeper whose time
        came, and a parent whose children are all finished; look again later at the others. Returns how
        many were woken."""
        woken = 0
        for _ in range(100):
            now, due = self.store.due_to_wake(self.batch)
            settled: list[tuple[str, str, int | None]] = []
            for job_id, score in due:
                at: int | None = None
                waiting = self.store.waiting_of(job_id)
                if waiting is not None and waiting.state is JobState.SUSPENDED:
                    if waiting.wake_ms is not None:
                        outcome = self.wake(job_id, waiting.token, waiting.operation)
                        at = waiting.wake_ms if outcome is Woken.EARLY else None
                        woken += outcome is Woken.QUEUED
                    elif self.children_done(waiting.children):
                        woken += self.wake(job_id, waiting.token, waiting.operation) is Woken.QUEUED
                    else:
                        at = now + CHILDREN_CHECK_MS
                elif waiting is not None and waiting.state is JobState.INPUT_REQUIRED:
                    at = self.time_out_questions(job_id, now)
                settled.append((job_id, score, at))
            self.store.settle_wakes(settled)
            if len(due) < self.batch:
                break
        return woken

    def time_out_questions(self, job_id: str, now: int) -> int | None:
        """Record the deadline's answer for each of the job's open questions whose deadline passed (Redis's
        clock), resuming the job once none is left open; returns when to look again (the next deadline), or
        None. Applied twice, the same: an answer is recorded once, and a person's answer that came first stands."""
        record = self.store.get(job_id)
        if record is None or record.state is not JobState.INPUT_REQUIRED:
            return None
        deadlines = {key: d for key, request in (record.input_requests or {}).items()
                     if (d := deadline_ms(request)) is not None}
        due = {key: TIMED_OUT for key, d in deadlines.items() if d <= now}
        later = [d for d in deadlines.values() if d > now]
        if due:
            outcome, _ = self.store.provide_input(job_id, record.owner, due, by=TIMEOUT_ACTION,
                                                  sweep_in_ms=int(1000 * self.settings.queued_grace_s))
            if self.audit is not None and outcome in (Answered.QUEUED, Answered.WAITING):  # as a person's is
                self.audit(TIMEOUT_ACTION, "job.answer", job_id=job_id, owner=record.owner,
                           detail=",".join(f"{key}:{TIMEOUT_ACTION}" for key in sorted(due)))
            if outcome is Answered.QUEUED:
                self.gate.resume(job_id, record.operation)
                return None
        return min(later) if later else None

    def run_forever(self, stop: threading.Event) -> None:
        def one_pass() -> None:
            self.wake_due()

        repeat(stop, one_pass, every_s=WAKE_INTERVAL_S, name="wake pass", logger=log)
