"""The job context (`ctx`): progress, cancellation points, recorded steps, questions, sleeps and child jobs.

Other agents' tasks (`call_tool`, `send_message`) are steps of the same kind: `remote_steps`.
A job function runs again from the top after every park (a question, a long sleep, a wait for children) and
after a lost worker: what it recorded (steps, answers, a sleep's end, a spawned child) comes back from the
record instead of happening again. Parking raises a control-flow exception that the executor turns into the
job's move to `input_required` or `suspended`, which returns the worker to the pool.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from marshmallow import Schema

from ..config import Settings
from ..errors import StoreUnavailable
from ..model.domain import JobRecord, JobState, rfc3339
from ..model.questions import DEADLINE_STEP, QUESTION_META, TIMEOUT_ACTION, check_addressees
from ..serving.tracing import JOB_ID, Tracing
from ..store.connect import through_outage
from ..store.fields import Change
from ..store.jobs import RedisStore
from ..store.outcomes import Standing, Stepped
from .parking import _Parked, _Suspend
from .registry import Registry
from .remote_steps import RemoteSteps

T = TypeVar("T")
Form = dict[str, Any] | type[Schema] | Schema | None
#: A sleep this long or longer parks the job (it holds no worker meanwhile); a shorter one sleeps in the worker.
PARK_MIN_S = 5.0
#: What is left of a long sleep when its job runs again (woken a moment early) is slept in the worker below this (ms).
NAP_REST_MS = 1000
#: How often a waiting parent's children are looked at again, should a child's notice have been lost (ms).
CHILDREN_CHECK_MS = 5000
#: The least TTL a child gets (s), however little its parent has left: the child may outlive its parent by
#: this much, and a run of it that starts once the parent is gone is cancelled (`Executor._parent_cancelled`).
CHILD_MIN_TTL_S = 1.0


# Control flow, not errors: BaseException so that a job's own `except Exception` cannot swallow them.
class CancellationRequested(BaseException):
    """Raised at a cancellation point once the owner cancelled the job (it is `cancelled` already)."""


class LeaseLost(BaseException):
    """This worker no longer holds the job (its lease lapsed, or the job expired or finished)."""


class HandedBack(BaseException):
    """Raised at a cancellation point once this worker is stopping: the job goes back to the queue."""


class QuestionTimedOut(Exception):
    """Raised by `ctx.ask` when a question with `on_timeout="fail"` was not answered by its deadline."""

    def __init__(self, key: str, deadline: str) -> None:
        self.key, self.deadline = key, deadline
        super().__init__(f"question {key} not answered by {deadline}")


#: The kinds of record `ctx.sleep`, `ctx.spawn` and `ctx.wait_for` make, named `<kind>:<n>` (the n-th of its kind in
#: a run): a rerun keeping steps reads spawns and waits by these names (`service.rerun`).
SLEEP_RECORD, SPAWN_RECORD, WAIT_RECORD = "sleep", "spawn", "wait"


class ChildFailed(Exception):
    """Raised by `ctx.wait_for` when a child job failed, was cancelled or is gone: `child_id` says which,
    `state` how it ended ("failed", "cancelled" or "missing"), `error` its error (None unless failed)."""

    def __init__(self, child_id: str, state: str, error: dict[str, Any] | None = None) -> None:
        self.child_id, self.state, self.error = child_id, state, error
        why = f": {error.get('message')}" if error and error.get("message") else ""
        super().__init__(f"Child job {child_id} {state}{why}")


class Runner(Protocol):
    """What the context needs of the executor that runs the job (`execution.Executor`)."""

    store: RedisStore
    registry: Registry
    settings: Settings
    stopping: threading.Event
    #: (owner, operation, params, idempotency key, parent id, TTL in s) -> the child's id; None: no child jobs here.
    spawner: Callable[[str, str, Any, str, str, float], str] | None
    #: The spans of steps and questions (children of the run's).
    tracing: Tracing


class Lease:
    """What the keeper knows of one running job: its token, and whether it was cancelled or lost."""

    def __init__(self, job_id: str, token: int) -> None:
        self.job_id, self.token = job_id, token
        self.cancelled = threading.Event()
        self.lost = threading.Event()

    def observe(self, state: Standing) -> None:
        if state == Standing.LOST:
            self.lost.set()
        elif state == Standing.CANCELLED:
            self.cancelled.set()  # the job is cancelled and this worker fenced out: nothing more is recorded


class JobContext(RemoteSteps):
    """What a job function gets as `ctx`."""

    def __init__(self, executor: Runner, record: JobRecord, token: int, keeper: Lease) -> None:
        self._executor = executor
        self._store = executor.store
        self._keeper = keeper
        self._token = token
        self._tolerance = executor.settings.lease_s * 10
        self.job_id = record.id
        self.operation = record.operation
        self.attempt = record.attempts  # the claim already counted this run
        self._last_progress = 0.0
        self._last_check = 0.0
        self.owner = record.owner
        #: When this job expires (Redis ms): its children expire with it.
        self._expires_ms = record.expires_ms
        #: The job was told it should stop because its worker is: whatever it returns is not its result.
        self.told_to_stop = False
        #: How many sleeps, spawns and waits this run made so far: the names of their records.
        self._counts: dict[str, int] = {}
        #: The job service built-in operations act through (`running.builtin`); None where the runtime gave none.
        self.actor: Any = getattr(executor, "actor", None)

    # -- progress and cancellation ----------------------------------------------
    def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Report progress. Cheap to call often: writes are coalesced to a few per second."""
        now = time.monotonic()
        final = total is not None and done >= total
        if not final and now - self._last_progress < 0.1:
            return
        self._last_progress = now
        try:
            state = self._store.progress(self.job_id, self._token, message=message, done=done, total=total)
        except StoreUnavailable:
            return  # progress is advisory; the next call or the outcome will carry on
        self._observe(state)

    def _observe(self, state: Standing) -> None:
        self._keeper.observe(state)
        self._last_check = time.monotonic()

    @property
    def cancelled(self) -> bool:
        if self._executor.stopping.is_set():
            self.told_to_stop = True
            return True
        if self._keeper.cancelled.is_set() or self._keeper.lost.is_set():
            return True
        if time.monotonic() - self._last_check > 0.05:
            try:
                standing = self._store.standing_of(self.job_id, self._token)
            except StoreUnavailable:
                return False
            self._observe(standing)
        return self._keeper.cancelled.is_set() or self._keeper.lost.is_set()

    def check_cancelled(self) -> None:
        """A cancellation point: raises if the job was cancelled or this worker lost it."""
        if self.cancelled:
            if self._keeper.cancelled.is_set():
                raise CancellationRequested()
            if self.told_to_stop:
                raise HandedBack()
            raise LeaseLost()

    # -- durability --------------------------------------------------------------
    def step(self, name: str, fn: Callable[[], T]) -> T:
        """Run `fn` once for this job and record its JSON result; a replay returns the record."""
        recorded = through_outage(lambda: self._store.recorded_step(self.job_id, name), self._tolerance)
        if recorded is not None:
            return json.loads(recorded)  # type: ignore[no-any-return]
        self.check_cancelled()
        tracing = self._executor.tracing
        if tracing.enabled:
            with tracing.span("step", attributes={JOB_ID: self.job_id, "tasks_backend.step.name": name}):
                return self._run_step(name, fn)
        return self._run_step(name, fn)

    def _run_step(self, name: str, fn: Callable[[], T]) -> T:
        value = fn()
        encoded = json.dumps(value)
        outcome, stored = through_outage(
            lambda: self._store.record_step(self.job_id, self._token, name, encoded), self._tolerance)
        if outcome is Stepped.CANCELLED:
            self._keeper.cancelled.set()
            raise CancellationRequested()
        if outcome is Stepped.FENCED:
            raise LeaseLost()
        return json.loads(stored)  # type: ignore[no-any-return]

    def idempotency_key(self, name: str) -> str:
        """A key stable across every replay of this job, for downstream APIs that deduplicate."""
        return hashlib.sha256(f"{self.job_id}:{name}".encode()).hexdigest()[:32]

    def ask(self, key: str, message: str, schema: Form = None, *, to: Sequence[str] | None = None,
            deadline: dt.timedelta | None = None, on_timeout: Any = "fail") -> Any:
        """The answer to `key` if one was given (None if declined); otherwise park the job and ask.

        `to`: who else may answer ("principal:NAME", "role:NAME"; the owner always may). `deadline`: when it
        passes unanswered, the answer is `on_timeout`, or with "fail" the job fails (`QuestionTimedOut`)."""
        return self.ask_all({key: (message, schema)}, to=to, deadline=deadline, on_timeout=on_timeout)[key]

    def ask_all(self, questions: dict[str, tuple[str, Form]], *, to: Sequence[str] | None = None,
                deadline: dt.timedelta | None = None, on_timeout: Any = "fail") -> dict[str, Any]:
        """Ask several questions at once; the job resumes when every one of them is answered (or timed out)."""
        addressed = check_addressees(list(to) if to is not None else None)
        recorded = through_outage(lambda: self._store.answers(self.job_id, list(questions)), self._tolerance)
        answers: dict[str, Any] = {}
        missing: dict[str, Any] = {}
        until: dict[str, int] = {}
        if deadline is not None and any(recorded.get(k) is None for k in questions):
            # Recorded once: a replay (after a partial answer, a lost worker) keeps the first deadline.
            first = through_outage(self._store.now_ms, self._tolerance) + int(deadline.total_seconds() * 1000)
            until = {key: int(self.step(DEADLINE_STEP + key, lambda: first)) for key in questions}
        for key, (message, schema) in questions.items():
            raw = recorded.get(key)
            if raw is None:
                params: dict[str, Any] = {"mode": "form", "message": message,
                                          "requestedSchema": self._executor.registry.form_schema(schema)}
                routing: dict[str, Any] = {"to": addressed} if addressed else {}
                if key in until:
                    routing.update(deadline=rfc3339(until[key]), deadlineMs=until[key])
                if routing:
                    params["_meta"] = {QUESTION_META: routing}
                missing[key] = {"method": "elicitation/create", "params": params}
                continue
            answer = json.loads(raw)
            if answer.get("action") == TIMEOUT_ACTION:
                if on_timeout == "fail":
                    stamp = self.step(DEADLINE_STEP + key, lambda: 0)
                    raise QuestionTimedOut(key, rfc3339(int(stamp)) if stamp else "its deadline")
                answers[key] = on_timeout
                continue
            answers[key] = answer.get("content") if answer.get("action") == "accept" else None
        if answers and self._executor.tracing.enabled:
            self._executor.tracing.record("answered", time.time_ns(), attributes={
                JOB_ID: self.job_id, "tasks_backend.question.keys": sorted(answers)})
        if missing:
            # Only the questions' names: their messages may quote the job's data.
            self._executor.tracing.record("question", time.time_ns(), attributes={
                JOB_ID: self.job_id, "tasks_backend.question.keys": sorted(missing)})
            if addressed:  # before the park: an index entry is read through the job, never ahead of it
                through_outage(lambda: self._store.note_asked(self.job_id, addressed, self._store.now_ms()),
                               self._tolerance)
            wake_in: int | None = None
            if until:
                now = through_outage(self._store.now_ms, self._tolerance)
                wake_in = max(0, min(until[k] for k in missing) - now)
            first_message = next(iter(missing.values()))["params"]["message"]
            raise _Parked(missing, first_message if len(missing) == 1 else f"{len(missing)} questions need answers.",
                          wake_in)
        return answers

    # -- waiting ---------------------------------------------------------------
    def _next(self, kind: str) -> str:
        """The record name of this run's next `kind` call (`sleep:0`, `spawn:2`...): the same on every replay."""
        n = self._counts.get(kind, 0)
        self._counts[kind] = n + 1
        return f"{kind}:{n}"

    def sleep(self, seconds: float, *, hold_worker: bool = False) -> None:
        """Sleep. From `PARK_MIN_S` (5 s) on, the job parks in `suspended` and returns its worker to the pool; it
        resumes (replaying from the top) at the end, which is recorded: a replay does not sleep it again.
        Shorter sleeps, and `hold_worker=True`, sleep in the worker. Cancelling the job ends it at once."""
        if hold_worker or seconds < PARK_MIN_S:
            self._nap(seconds)
            return
        until = self.step(self._next(SLEEP_RECORD),
                          lambda: through_outage(self._store.now_ms, self._tolerance) + int(seconds * 1000))
        self._sleep_to(int(until), nap_below_ms=NAP_REST_MS)

    def sleep_until(self, when: dt.datetime) -> None:
        """Sleep until `when` (a naive datetime is taken as UTC), parking as `sleep` does when 5 s or more away."""
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        self._sleep_to(int(when.timestamp() * 1000), nap_below_ms=int(PARK_MIN_S * 1000))

    def _sleep_to(self, until_ms: int, nap_below_ms: int) -> None:
        """Park until `until_ms` (Redis ms), or sleep in the worker if less than `nap_below_ms` is left."""
        left = until_ms - through_outage(self._store.now_ms, self._tolerance)
        if left < nap_below_ms:
            self._nap(max(0, left) / 1000)
            return
        self.check_cancelled()
        raise _Suspend(Change.waiting(f"Sleeping until {rfc3339(until_ms)}.", wake_ms=until_ms), left)

    def spawn(self, operation: str, params: Any = None) -> str:
        """Start a child job (owned by this job's owner, with `parentId` this job) and return its id. Recorded:
        a replay gets the same child, even when the worker died between making it and recording it.

        The child expires when this job does (at least `CHILD_MIN_TTL_S` from now), whatever its operation's
        TTL: a parent's wait cannot lose a finished child, nor a cancel of the parent miss a live one."""
        name = self._next(SPAWN_RECORD)
        key = self.idempotency_key(name)
        spawner = self._executor.spawner
        if spawner is None:
            raise RuntimeError("This worker cannot start child jobs: its runtime gave it no spawner.")

        def submit() -> str:
            # The time this job has left by Redis's clock, which expires it, read now rather than from the claim: a
            # rerun that took this job over as a child while it ran has lengthened its life since. The idempotency
            # record lives as long as the child, so a replay after a lost worker finds the child made before for as
            # long as the parent lives.
            left_ms = self._store.time_left_ms(self.job_id)
            if left_ms is None:  # gone already: its claim's view; the child is cancelled at its pickup anyway
                left_ms = self._expires_ms - self._store.now_ms()
            return spawner(self.owner, operation, params, key, self.job_id, max(left_ms / 1000, CHILD_MIN_TTL_S))

        # The submit is idempotent by `key`, so one whose reply was lost in an outage is made again safely.
        return str(self.step(name, lambda: through_outage(submit, self._tolerance)))

    def wait_for(self, ids: Iterable[str]) -> list[Any]:
        """Wait until every job in `ids` is finished, holding no worker meanwhile; return their results in order.
        Raises `ChildFailed` for the first that failed, was cancelled or is gone (another owner's job counts
        as gone). The outcome is recorded: a replay answers the same."""
        wanted, name = [str(i) for i in ids], self._next(WAIT_RECORD)
        recorded = through_outage(lambda: self._store.recorded_step(self.job_id, name), self._tolerance)
        outcome = json.loads(recorded) if recorded is not None else None
        if outcome is None:
            records = through_outage(lambda: self._store.get_many(wanted), self._tolerance)
            mine = [r if r is not None and r.owner == self.owner else None for r in records]
            # Only these hold the wait: what reads as gone here (another owner's job) must not keep it
            # waiting until that job ends.
            open_ = [r.id for r in mine if r is not None and not r.terminal]
            if open_:
                self.check_cancelled()
                raise _Suspend(Change.waiting(f"Waiting for {len(open_)} child job{'s' * (len(open_) != 1)}.",
                                              children_json=json.dumps(open_)), CHILDREN_CHECK_MS, open_)
            outcome = self.step(name, lambda: _outcome(wanted, mine))
        if "failed" in outcome:
            raise ChildFailed(**outcome["failed"])
        return list(outcome["results"])

    def _nap(self, seconds: float) -> None:
        """Sleep in the worker, waking early (and raising) if the job is cancelled or lost meanwhile."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.check_cancelled()
            self._keeper.cancelled.wait(min(left, 0.1))
        self.check_cancelled()


def _outcome(ids: list[str], records: list[JobRecord | None]) -> dict[str, Any]:
    """What `wait_for` records once every child is finished: their results, or the first that did not complete."""
    for child_id, record in zip(ids, records, strict=True):
        if record is None:
            return {"failed": {"child_id": child_id, "state": "missing"}}
        if record.state is not JobState.COMPLETED:
            return {"failed": {"child_id": child_id, "state": record.state.value, "error": record.error}}
    return {"results": [r.result for r in records if r is not None]}
