"""Running one job on a worker: claim, lease keeping, and recording the outcome (the job context: `context`).

Delivery is at least once, so this is where "runs once" is made: a claim is a lease with a fencing
token, every write carries the token (a worker that lost its lease can change nothing), recorded
steps and answers are replayed instead of re-run, and a job that waits for a person returns its
worker to the pool. A worker that stops hands its running jobs back to the queue at their next
cancellation point, so that they resume at once elsewhere (or on its next start) from their last
recorded step, rather than when their lease lapses.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..config import Settings
from ..errors import DispatchUnavailable, StoreUnavailable, TasksBackendError
from ..model.domain import TERMINAL_STATES, JobRecord, JobState, now_ms
from ..serving.tracing import Tracing, job_attributes, ms_to_ns
from ..store.admission import GateLeave
from ..store.claims import ClaimTerms, read_claim
from ..store.connect import through_outage
from ..store.fields import Change
from ..store.jobs import RedisStore
from ..store.outcomes import Cancelled, Claimed, Moved
from ..store.runner import new_request_id
from .admission import DispatchGate
from .builtin import BUILTINS
from .context import CancellationRequested, HandedBack, JobContext, Lease, LeaseLost
from .dispatch import Dispatcher
from .parking import _Parked, _Suspend
from .registry import JobSpec, Registry
from .stats import JobStats
from .waking import Waker

#: What `ctx.spawn` calls: (owner, operation, params, idempotency key, parent id, TTL in s) -> the child's id.
Spawner = Callable[[str, str, Any, str, str, float], str]
log = logging.getLogger(__name__)
#: How often a worker process writes what may lag a job's outcome (metrics, sweep schedule cleanup).
TICK_S = 1.0


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class LeaseKeeper:
    """One thread per worker process renews the leases of every job the process runs, in one round trip,
    and calls `tick` about once a second (to write what may lag a job's outcome).

    It starts on first use, so in a prefork pool it runs in each child, never in the parent.
    """

    def __init__(self, store: RedisStore, lease_ms: int, tick: Callable[[], None] = lambda: None) -> None:
        self.store, self.lease_ms, self.tick = store, lease_ms, tick
        self._leases: dict[str, Lease] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def hold(self, job_id: str, token: int) -> Lease:
        lease = Lease(job_id, token)
        with self._lock:
            self._leases[job_id] = lease
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
                self._thread.start()
        return lease

    def release(self, lease: Lease) -> None:
        with self._lock:
            if self._leases.get(lease.job_id) is lease:
                del self._leases[lease.job_id]

    def _run(self) -> None:
        interval = self.lease_ms / 3000
        renew_at = time.monotonic() + interval
        while True:
            time.sleep(min(interval, TICK_S))
            try:
                self.tick()
            except Exception:
                log.exception("lease keeper tick failed")
            if time.monotonic() < renew_at:
                continue
            renew_at = time.monotonic() + interval
            with self._lock:
                held = list(self._leases.values())
            if not held:
                continue
            try:
                states = self.store.renew_many([(h.job_id, h.token) for h in held], lease_ms=self.lease_ms)
            except StoreUnavailable:
                continue
            for lease, state in zip(held, states, strict=True):
                lease.observe(state)


class Executor:
    def __init__(self, store: RedisStore, registry: Registry, dispatcher: Dispatcher, settings: Settings,
                 name: str | None = None, spawner: Spawner | None = None, tracing: Tracing | None = None,
                 actor: Any = None) -> None:
        self.store, self.registry, self.dispatcher, self.settings = store, registry, dispatcher, settings
        #: The spans of runs, steps, questions and retries (off unless the runtime's tracing is on).
        self.tracing = tracing or Tracing.off()
        #: The job service built-in operations act through (`builtin.BulkActor`), wired by the runtime.
        self.actor = actor
        #: Starts a child job for `ctx.spawn` (the service's submit, wired by the runtime).
        self.spawner = spawner
        self.waker = Waker(store, dispatcher, settings)
        self.name = name or worker_name()
        self.lease_ms = int(settings.lease_s * 1000)
        self.keeper = LeaseKeeper(store, self.lease_ms, tick=self.flush)
        self.stats = JobStats(store)
        #: The dispatch gate: a run that ends lets held jobs in; a retry or a hand-back is admitted again.
        self.admission = DispatchGate(store, dispatcher, settings)
        #: Set when this process's worker stops: running jobs are handed back at their next cancellation point.
        self.stopping = threading.Event()
        self._running: dict[str, JobRecord] = {}
        self._finished: list[str] = []
        #: Runs that left the dispatch gate in their last transition (`_finish`): `run` leaves it no second time.
        self._left: set[str] = set()
        self._finished_lock = threading.Lock()
        #: What this executor's own claims ask (the transport's claims name the worker's main process instead).
        self.claim_terms = ClaimTerms(self.lease_ms, self.name, settings.max_attempts)

    def flush(self) -> None:
        """Write what may lag a job's outcome by a second: its metrics, and taking it off the sweep schedule.

        Neither is needed for correctness at once: the sweeper drops the entry of a finished job it
        finds, and metrics are metrics. Batching them keeps a finished job to one command."""
        with self._finished_lock:
            finished, self._finished = self._finished, []
            running = {job_id: r.expires_ms for job_id, r in self._running.items()}
        try:
            self.store.unschedule_finished(finished, also=lambda pipe: self.stats.flush_into(pipe, running))
        except StoreUnavailable:
            self.stats.forget_running()  # written again in full by the next flush
            log.debug("deferred writes dropped: Redis is unreachable")

    def run(self, job_id: str, fetched: Sequence[Any] | None = None) -> str:
        """Run the job if it is ours to run; returns what happened (for logs and tests). `fetched`: the reply of
        the claim the worker's transport made with the job's message (`store.claims.FetchClaim`), when it made one."""
        if fetched is not None:
            outcome, record = read_claim(job_id, fetched)
        else:
            outcome, record = self.store.claim(job_id, self.claim_terms)
        if outcome is not Claimed.OK or record is None:
            self.admission.after_run(job_id, outcome)
            return outcome
        if record.parent_id is not None and self._parent_cancelled(record):
            done = self._cancelled(record)
            self.admission.after_run(job_id, done, record, self.registry.get)
            return done
        lease = self.keeper.hold(job_id, record.token)
        with self._finished_lock:
            self._running[job_id] = record
        done = "lost"
        try:
            done = self._traced(record, lease) if self.tracing.enabled else self._execute(record, record.token, lease)
            return done
        finally:
            with self._finished_lock:
                self._running.pop(job_id, None)
            self.keeper.release(lease)
            with self._finished_lock:
                left = job_id in self._left
                self._left.discard(job_id)
            if not left:
                self.admission.after_run(job_id, done, record, self.registry.get)

    def hand_back_overdue(self) -> list[str]:
        """Hand back, from outside them, the jobs still running here once a stop's deadline has passed: they
        reached no cancellation point (a long computation, a blocking call). The move is fenced by each run's
        token, so the run, if it ever goes on, can record nothing more. Returns the ids handed back."""
        with self._finished_lock:
            running = list(self._running.values())
        return [r.id for r in running if self._hand_back(r, r.token) == "handed back"]

    def _traced(self, record: JobRecord, lease: Lease) -> str:
        """The run as a span under the submit (the job's stored context), after its wait in the queue."""
        attributes = job_attributes(record.id, record.operation, record.owner)
        started = time.time_ns()
        if record.queued_ms:
            self.tracing.record("queue wait", ms_to_ns(record.queued_ms), parent=record.trace, attributes=attributes,
                                end_ns=started)
        run = {**attributes, "tasks_backend.run.attempt": record.attempts, "tasks_backend.run.retries": record.retries}
        with self.tracing.span("run", parent=record.trace, attributes=run, start_ns=started):
            done = self._execute(record, record.token, lease)
            self.tracing.annotate({"tasks_backend.run.outcome": done})
            if done == JobState.FAILED.value:
                self.tracing.failed(done)
            return done

    def _execute(self, record: JobRecord, token: int, keeper: Lease) -> str:
        ctx = JobContext(self, record, token, keeper)
        spec: JobSpec | None = None
        try:
            spec = BUILTINS.get(record.operation) or self.registry.get(record.operation)
            params = spec.load_params(record.params)
            result = spec.fn(ctx, **params)
            if ctx.told_to_stop:  # it saw `cancelled` and returned early: what it returned is not its result
                raise HandedBack()
            encoded = json.dumps(result)
        except HandedBack:
            return self._hand_back(record, token)
        except _Suspend as waiting:
            return self._park(record, token, waiting)
        except _Parked as parked:
            return self._finish(record, token, JobState.INPUT_REQUIRED,
                                Change.parked(json.dumps(parked.requests), parked.message),
                                wake_in_ms=parked.wake_in_ms)
        except CancellationRequested:
            return self._cancelled(record)
        except LeaseLost:
            return "lost"
        except Exception as exc:
            if spec is not None and isinstance(exc, spec.retry_on):
                retried = self._retry(record, token, spec, exc)
                if retried:
                    return retried
            log.info("job %s (%s) failed: %s", record.id, record.operation, type(exc).__name__)
            error = _error(exc)
            failed = Change.failed(json.dumps(error), error["message"][:200])
            return self._finish(record, token, JobState.FAILED, failed)
        return self._finish(record, token, JobState.COMPLETED, Change.completed(encoded))

    def _retry(self, record: JobRecord, token: int, spec: JobSpec, exc: Exception) -> str | None:
        retries = record.retries
        if retries >= spec.max_retries:
            return None
        delay = spec.retry_backoff_s * (2**retries)
        self.tracing.record("retry", time.time_ns(), attributes={
            **job_attributes(record.id, record.operation, record.owner), "tasks_backend.retry.number": retries + 1,
            "tasks_backend.retry.delay_s": delay, "tasks_backend.retry.error_type": type(exc).__name__})
        # The sweep entry rides with the move into `queued`: if the publish below never happens, the
        # sweeper republishes once the delay and the grace have passed.
        retrying = Change.retrying(retries + 1, f"Retrying in {delay:g}s after {type(exc).__name__}.")
        outcome = self._finish(
            record, token, JobState.QUEUED, retrying,
            sweep_in_ms=int(1000 * (delay + self.settings.queued_grace_s)))
        if outcome == JobState.QUEUED:
            try:
                self.admission.requeue(record, delay)
            except DispatchUnavailable:
                with contextlib.suppress(StoreUnavailable):
                    self.store.schedule_sweep(record.id, int(1000 * delay))
        return outcome

    def _hand_back(self, record: JobRecord, token: int) -> str:
        """This worker is stopping: the job goes back to the queue now, not when its lease lapses, and is
        published again (the broker outlives the workers in an orderly stop). Its recorded steps and answers
        stay, so it resumes from the last one; this run is not counted as an attempt, since no worker was
        lost. Fenced by the token like every write, and replay-safe like every transition."""
        outcome = self._finish(record, token, JobState.QUEUED, Change.handed_back(
            max(0, record.attempts - 1), "Handed back by a stopping worker; it resumes from its last recorded step."),
            sweep_in_ms=int(1000 * self.settings.queued_grace_s))
        if outcome != JobState.QUEUED:
            return outcome
        # Unpublished, it is republished by the sweeper from the entry the move wrote, after the grace.
        with contextlib.suppress(DispatchUnavailable):
            self.admission.requeue(record)
        return "handed back"  # the runner task logs it

    def _finish(self, record: JobRecord, token: int, target: JobState, change: Change,
                sweep_in_ms: int | None = None, wake_in_ms: int | None = None) -> str:
        terminal = target in TERMINAL_STATES
        # One request id across the retries below: a retry of a change that was applied answers "ok".
        request_id = new_request_id()
        # On a single Redis the run leaves the dispatch gate in the same script (one call less per job).
        leave = self.admission.leaving(record, target.value, self.registry.get)
        outcome, _, at = through_outage(lambda: self.store.transition(
            record.id, target, token=token, change=change, unschedule=not terminal, sweep_in_ms=sweep_in_ms,
            request_id=request_id, leave=leave, wake_in_ms=wake_in_ms), self.settings.lease_s * 10)
        if outcome is Moved.CANCELLED:
            return self._cancelled(record)  # cancelled meanwhile: the outcome (or the park) is not recorded
        if outcome is not Moved.OK:
            return outcome
        self._left_in(leave, record)
        self.stats.note_outcome(record, target, at)
        if terminal:
            with self._finished_lock:
                self._finished.append(record.id)
            self._tell_parent(record)
        return target.value

    def _left_in(self, leave: GateLeave | None, record: JobRecord) -> None:
        """The run left the gate in its last move (`leave.taken`): `run` leaves it no second time, and what the
        leave let in is published."""
        if leave is not None and leave.taken:
            with self._finished_lock:
                self._left.add(record.id)
            self.admission.left(leave)

    def _park(self, record: JobRecord, token: int, waiting: _Suspend) -> str:
        """The job waits for a time or for its children (`ctx.sleep`, `ctx.wait_for`), holding no worker. A
        parent then reads its children at once: the last of them may have finished before the park."""
        request_id = new_request_id()
        # The run leaves the dispatch gate in the park itself: a child that finishes right after the park wakes the
        # parent at once, and the gate must then see a job out of flight, not this run still in it.
        leave = self.admission.leaving(record, JobState.SUSPENDED.value, self.registry.get)
        outcome, _ = through_outage(lambda: self.store.park(
            record.id, token, waiting.change, look_in_ms=waiting.look_in_ms, request_id=request_id, leave=leave),
            self.settings.lease_s * 10)
        if outcome is Moved.CANCELLED:
            return self._cancelled(record)
        if outcome is not Moved.OK:
            return outcome
        self._left_in(leave, record)
        if waiting.children:
            with contextlib.suppress(StoreUnavailable):  # the wake schedule looks again soon
                self.waker.check_parent(record.id)
        return JobState.SUSPENDED.value

    def _parent_cancelled(self, record: JobRecord) -> bool:
        """A child whose parent was cancelled (and whose cancel the parent's cancel missed) is cancelled now; so
        is one whose parent expired, as nothing is left to collect its result, and the parent's index, which a
        cancel follows, expired with it."""
        assert record.parent_id is not None
        parent = self.store.states_of([record.parent_id])[0]
        if parent is not None and parent is not JobState.CANCELLED:
            return False
        return self.store.request_cancel(record.id, record.owner) is Cancelled.CANCELLED

    def _tell_parent(self, record: JobRecord) -> None:
        """A child finished: its parent may wait for it (see `waking`). The parent it names now, not at its claim: a
        rerun may have taken it over while it ran (`service.rerun`), and the job that made it waits for nothing."""
        if record.parent_id is not None:
            parent = record.parent_id
            try:
                parent = self.store.parent_of(record.id) or parent
                self.waker.check_parent(parent)
            except StoreUnavailable:
                log.info("parent %s of %s left to the wake schedule", parent, record.id)

    def _cancelled(self, record: JobRecord) -> str:
        """The owner cancelled this run (the job is `cancelled` already): count it, record nothing."""
        self.stats.note_outcome(record, JobState.CANCELLED, now_ms())
        with self._finished_lock:
            self._finished.append(record.id)
        self._tell_parent(record)
        return JobState.CANCELLED.value


def _error(exc: BaseException) -> dict[str, Any]:
    message = exc.detail if isinstance(exc, TasksBackendError) else str(exc)
    return {"message": message or type(exc).__name__, "type": type(exc).__name__}
