"""JobService: the semantics every protocol adapter and the Python API share.

submit (idempotent) · get · read · list (`reads`) · cancel · provide_input · watch. Every call that names a job checks
that the caller owns it; another owner's job raises exactly the `JobNotFound` a missing one does. `read`,
`watch_view` and `provide_input` also let in those the job's questions were addressed to (`service.questions`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

from ..access.auth import Principal
from ..access.policy import Limits, NoLimits
from ..access.request import current as request_context
from ..config import Settings
from ..errors import (
    BadRequest,
    DispatchUnavailable,
    IdempotencyConflict,
    InvalidParams,
    JobNotCancelable,
    JobNotFound,
    NotWaitingForInput,
    QuotaExceeded,
    UnknownOperation,
)
from ..model.domain import JobRecord, JobState, SubmitOutcome, new_uuid
from ..model.timing import Timing
from ..running.admission import DispatchGate
from ..running.builtin import BUILTINS, spec_of
from ..running.dispatch import Dispatcher, RedisDispatcher
from ..running.registry import Operations
from ..serving.drain import Drain, Interrupted
from ..serving.tracing import JOB_ID, OPERATION, Tracing, job_attributes
from ..store import fields as job_fields
from ..store.admission import Released
from ..store.feeds import Event
from ..store.jobs import ListPush, RedisStore
from ..store.outcomes import Answered, Cancelled
from .answers import check_answer, normalize_answer
from .audit import Audit
from .bulk import Bulk
from .children import ChildJobs
from .cursors import valid_id
from .filters_reads import FilteredReads
from .questions import JobView, Questions
from .reads import as_principal
from .rerun import RerunOf, Reruns

log = logging.getLogger(__name__)

MAX_IDEMPOTENCY_KEY = 255


#: `json.dumps` with options builds its encoder on every call: this one is built once.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


def canonical_json(value: Any) -> str:
    return _CANONICAL(value)


#: In a request's hash, before its timing (`Timing.identity`): the hashes made before timing was part of a request
#: have neither.
TIMED = "timed"


def request_digest(request: list[Any]) -> str:
    """What an idempotency key stands for: a digest of the request it was first used with."""
    return hashlib.sha256(canonical_json(request).encode()).hexdigest()[:32]


class JobService(FilteredReads, Reruns, Bulk, ChildJobs):
    def __init__(self, store: RedisStore, registry: Operations, dispatcher: Dispatcher, settings: Settings,
                 drain: Drain | None = None, *, limits: Limits | None = None) -> None:
        self.store = store
        #: What submits are checked against: the job modules' registry, or what the workers published.
        self.registry = registry
        self.dispatcher = dispatcher
        self.settings = settings
        #: Ends `watch` early when the process stops (see `drain`).
        self.drain = drain or Drain()
        #: What a submit is checked against and a listing's scan reported to (see `access.policy`).
        self.limits: Limits = limits if limits is not None else NoLimits()
        #: The dispatch gate every submit and resumption goes through.
        self.admission = DispatchGate(store, dispatcher, settings)
        #: Where cancels, answers and the other actions of callers are recorded (see `service.audit`).
        self.audit = Audit(store, settings)
        #: Who besides the owner may answer a job's questions, and one-time answer links (`service.questions`).
        self.questions = Questions(store, settings)
        #: Spans of submits and answers (set by `runtime.build_runtime`).
        self.tracing = Tracing.off()

    # -- submit ----------------------------------------------------------------
    def submit(self, principal: Principal | str, operation: str, params: Any = None, *,
               idempotency_key: str | None = None, ttl_s: float | None = None, run_at_ms: int | None = None,
               delay_ms: int | None = None, priority: int | None = None,
               parent_id: str | None = None) -> tuple[JobRecord, SubmitOutcome]:
        """Accept a job (or, with an idempotency key already used for the same request, return that one).

        `run_at_ms` (ms since the epoch) or `delay_ms`: it does not start before then; `priority` 0-9 (default
        5): among the owner's queued jobs, higher runs first. Bad values raise `InvalidParams` naming the field.
        `parent_id`: the job whose `ctx.spawn` makes this one; the child is added to the parent's index.
        """
        if operation in BUILTINS:  # started by the service only (`POST /v1/jobs/bulk`), never by name
            raise UnknownOperation()
        attributes = job_attributes(None, operation, as_principal(principal).name) if self.tracing.enabled else None
        with self.tracing.span("submit", attributes=attributes):
            record, outcome = self._submit(principal, operation, params, idempotency_key, ttl_s,
                                           Timing(run_at_ms, delay_ms, priority), parent_id)
            self.tracing.annotate({JOB_ID: record.id, "tasks_backend.submit.outcome": outcome.value})
        if parent_id is not None:
            record = self._indexed_child(parent_id, record)
        return record, outcome

    def _cancelled_leave(self, job_ids: list[str]) -> None:
        """Cancelled jobs out of the dispatch gate: a held or delayed one waits for nothing now; one sent to a worker
        keeps its place in flight (and its concurrency value) until its run ends, which it may not do before its
        next cancellation point."""
        self.admission.leave(job_ids, final=True, waiting=True)

    def _submit(self, principal: Principal | str, operation: str, params: Any, idempotency_key: str | None,
                ttl_s: float | None, timing: Timing, parent_id: str | None,
                rerun: RerunOf | None = None) -> tuple[JobRecord, SubmitOutcome]:
        """A submit; `rerun`: the job is a rerun of another (see `service.rerun`), built-in operations allowed."""
        owner = as_principal(principal).name
        refused: QuotaExceeded | None = None
        try:
            # A child's TTL is its parent's time left (`JobContext.spawn`), which the parent's submit was held to:
            # the cap on what a caller may ask for would let the child expire before its parent collects it.
            capped = self.limits.check_submit(owner, params, ttl_s if parent_id is None else None)
            ttl_s = capped if parent_id is None else ttl_s
        except QuotaExceeded as exc:
            if idempotency_key is None:
                raise
            refused = exc  # a replay of a job made before the owner reached its limit still gets it back
        spec = spec_of(self.registry, operation)
        stored_params = spec.dump_params(spec.load_params(params))
        if idempotency_key is not None and not (0 < len(idempotency_key) <= MAX_IDEMPOTENCY_KEY):
            raise BadRequest(f"An idempotency key must be 1 to {MAX_IDEMPOTENCY_KEY} characters.")
        # What a replay must repeat to get the same handle; only a submit with a key needs it.
        request = [operation, stored_params, *([rerun.of, rerun.keep_steps] if rerun else [])]
        request_hash = "" if idempotency_key is None else request_digest([*request, TIMED, *timing.identity()])
        if refused is not None:
            assert idempotency_key is not None
            value = self.store.idempotency_value(owner, idempotency_key)
            replayed = None if value is None else self._replayed(owner, value, request_hash, request)
            if replayed is None:
                raise refused
            return replayed, SubmitOutcome.EXISTING
        ttl_ms = self._ttl_ms(spec.ttl_s, ttl_s)
        # A start time is measured against Redis's clock, the one the gate starts the job by; only a submit that
        # names a time pays the round trip.
        timing.check(ttl_ms, self.store.now_ms() if timing.run_at_ms is not None else 0)
        poll_ms = int(1000 * (spec.poll_interval_s or self.settings.default_poll_s))
        params_json = canonical_json(stored_params)

        for _ in range(3):
            job_id = new_uuid()
            # `created` and `updated` come from Redis's clock, set by the script and returned with its reply.
            new = job_fields.new_job(owner=owner, operation=operation, ttl_ms=ttl_ms, poll_ms=poll_ms,
                                     params_json=params_json, idempotency_key=idempotency_key,
                                     parent_id=parent_id, run_at_ms=timing.run_at_ms,
                                     delay_ms=timing.delay_ms, priority=timing.priority,
                                     rerun_of=rerun.of if rerun else None, checkpointed=bool(rerun and rerun.steps),
                                     trace=self.tracing.traceparent())
            if rerun is not None:  # before the job exists: no run of it can start without them
                self.store.copy_steps(job_id, rerun.steps, ttl_ms)
            # Through the dispatch gate (fair shares, delays, concurrency; `running.admission`), in the same round
            # trip on a single Redis. When the broker is the store's Redis the enqueue rides in it too (with a
            # key, only if the key turns out ours: see `RedisStore.create`).
            entry = self.admission.entry(job_id, owner, operation, spec, stored_params, timing)
            push = self._inline_push(job_id, operation) if entry is None else None
            released: Released = []
            in_trip = entry if self.store.single else None
            created, existing = self.store.create(
                new, job_id, owner, idem_key=idempotency_key, idem_value=f"{job_id} {request_hash}",
                ttl_ms=ttl_ms, sweep_in_ms=int(1000 * self.settings.queued_grace_s), push=push, gate=in_trip,
                released=released)
            if created is None:
                continue  # the id was taken: another one
            if existing is None:
                record = job_fields.created_record(job_id, new, created)
                if entry is not None and in_trip is None:
                    self.admission.admit(job_id, entry)
                elif entry is not None:
                    self.admission.publish(released)
                elif push is None:
                    self._publish(record)
                return record, SubmitOutcome.CREATED
            self.store.discard(job_id)
            assert idempotency_key is not None
            replayed = self._replayed(owner, existing, request_hash, request)
            if replayed is not None:
                return replayed, SubmitOutcome.EXISTING
            # The job behind the key expired a moment ago: free the key and submit afresh.
            self.store.release_idempotency(owner, idempotency_key, existing)
        raise IdempotencyConflict("The idempotency key is in use by a request still being processed.")

    def _replayed(self, owner: str, value: str, request_hash: str, request: list[Any]) -> JobRecord | None:
        """The job an idempotency record (`value`: '<job id> <request hash>') names for a replay of the same
        request, or None when that job is gone; `IdempotencyConflict` for another request's key.

        A key used before the timing was part of a request holds a hash of `request` without it (and without
        `TIMED`, so that no later hash is ever taken for one): a replay of that request still gets its job, until
        such keys expire with their jobs. Only a mismatch pays for that second digest."""
        other_id, _, other_hash = value.partition(" ")
        if other_hash != request_hash and other_hash != request_digest(request):
            raise IdempotencyConflict()
        record = self.store.get(other_id)
        if record is not None and record.owner != owner:
            # Keyed by a digest of the owner's name, as the owner index is: the job is checked, not the key.
            raise IdempotencyConflict()
        return record

    def _inline_push(self, job_id: str, operation: str) -> ListPush | None:
        dispatcher = self.dispatcher
        if isinstance(dispatcher, RedisDispatcher) and dispatcher.shares_store:
            return dispatcher.inline_push(job_id, operation)
        return None

    def _ttl_ms(self, spec_ttl_s: float | None, requested_s: float | None) -> int:
        ttl_s = requested_s if requested_s is not None else (spec_ttl_s or self.settings.default_ttl_s)
        if ttl_s <= 0:
            raise InvalidParams("The TTL must be positive.")
        return int(1000 * min(ttl_s, self.settings.max_ttl_s))

    def _publish(self, record: JobRecord, countdown_s: float | None = None) -> None:
        """Publish; if the broker is down the job stays queued and the sweeper publishes it soon."""
        try:
            self.dispatcher.publish(record.id, record.operation, countdown_s)
        except DispatchUnavailable:
            try:
                self.store.schedule_sweep(record.id, 0)
            except Exception:
                log.warning("job %s left for the sweeper's regular pass", record.id)

    # -- change ----------------------------------------------------------------
    def cancel(self, who: Principal | str, job_id: str) -> JobRecord:
        """Cancel now and return the job, `cancelled`. A running job's worker is fenced out at once (none
        of its later progress, steps, questions or result is recorded) and stops at its next
        cancellation point; what its code did outside the job record before then stays done."""
        principal = as_principal(who)
        if not valid_id(job_id):
            raise JobNotFound()
        outcome = self.store.request_cancel(job_id, self.acting_owner(principal, job_id))
        if outcome is Cancelled.MISSING:
            raise JobNotFound()
        if outcome is Cancelled.TERMINAL:
            raise JobNotCancelable()
        self._cancelled_leave([job_id])
        record = self.get(principal, job_id)
        self.audit.record(principal, "job.cancel", job_id=job_id, owner=record.owner)
        self._after_cancel(record)
        return record

    def provide_input(self, who: Principal | str, job_id: str, responses: Any, *,
                      only: set[str] | None = None) -> JobRecord:
        """Record answers to open input requests; once all are answered the job resumes. The owner answers any,
        an addressee those addressed to it (`service.questions`); `only`: these keys, whoever asks (a link)."""
        if not self.tracing.enabled:
            return self._provide_input(who, job_id, responses, only)
        with self.tracing.span("answer", attributes=job_attributes(job_id, None, as_principal(who).name)):
            record = self._provide_input(who, job_id, responses, only)
            self.tracing.annotate({OPERATION: record.operation, "tasks_backend.job.state": record.state.value})
            self.tracing.link(record.trace)  # the job's own trace, which the caller's need not be
            return record

    def _provide_input(self, who: Principal | str, job_id: str, responses: Any, only: set[str] | None) -> JobRecord:
        principal = as_principal(who)
        if not isinstance(responses, dict) or not responses:
            raise InvalidParams("`inputResponses` must be a non-empty JSON object.")
        record = self.store.get(job_id) if valid_id(job_id) else None
        if record is None:
            raise JobNotFound()
        allowed = only if only is not None else self.questions.answerable(principal, record)
        if record.state is not JobState.INPUT_REQUIRED or allowed == set():
            raise NotWaitingForInput()
        requests = record.input_requests or {}
        answers: dict[str, str] = {}
        problems: dict[str, list[str]] = {}
        for key, value in responses.items():
            if key not in requests or (allowed is not None and key not in allowed):
                continue  # unknown, superseded or not the caller's keys are ignored, as the MCP extension asks
            answer = normalize_answer(value)
            schema = requests[key].get("params", {}).get("requestedSchema") or {}
            issues = check_answer(schema, answer)
            if issues:
                problems[key] = issues
            answers[key] = canonical_json(answer)
        if problems:
            raise InvalidParams("Some answers do not match the requested schema.", extra={"errors": problems})
        if answers:
            # The sweep entry is written with the move into `queued`: if this process dies before the
            # publish below, the sweeper publishes once the grace has passed.
            context = request_context()
            outcome, _ = self.store.provide_input(job_id, record.owner, answers,
                                                  sweep_in_ms=int(1000 * self.settings.queued_grace_s),
                                                  by=principal.name, address=context.address if context else "")
            if outcome is Answered.MISSING:
                raise JobNotFound()
            if outcome is Answered.CONFLICT:
                raise NotWaitingForInput()
            # The keys and how each was answered (accept, decline, cancel), never the content.
            self.audit.record(principal, "job.answer", job_id=job_id, owner=record.owner, detail=",".join(
                f"{key}:{json.loads(value)['action']}" for key, value in sorted(answers.items())))
            if outcome is Answered.QUEUED:
                resumed = self.store.get(job_id)
                if resumed is not None:
                    self.admission.resume(resumed.id, resumed.operation)
                    return resumed
        return self.store.get(job_id) or record

    # -- follow ----------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        """The process is stopping: a wait that would start `watch` again answers as things stand instead."""
        return self.drain.stopping

    def watch(self, who: Principal | str, job_id: str, *, after: str = "0-0", max_s: float = 25.0,
              block_ms: int = 1000) -> Iterator[tuple[str, JobRecord]]:
        """Yield the job as it stands, then (event id, record) for each change after `after`, until
        it is terminal, `max_s` has passed or the process is stopping."""
        yield from self._changes(self.get(who, job_id), after, max_s, block_ms)

    def watch_view(self, who: Principal | str, job_id: str, *, after: str = "0-0", max_s: float = 25.0,
                   block_ms: int = 1000) -> Iterator[tuple[str, JobView]]:
        """`watch` for whoever may `read` the job: each change as the caller may see it (`JobView`)."""
        principal = as_principal(who)
        for event_id, record in self._changes(self.read(principal, job_id).record, after, max_s, block_ms):
            yield event_id, self.questions.seen_by(principal, record)

    def _changes(self, record: JobRecord, after: str, max_s: float, block_ms: int) -> Iterator[tuple[str, JobRecord]]:
        job_id = record.id
        deadline = time.monotonic() + max_s
        yield "", record
        if record.terminal:
            return
        last = after
        while time.monotonic() < deadline:
            try:
                with self.drain.read():
                    events = self.store.events(job_id, last, block_ms)
            except Interrupted:
                return
            if not events:
                if self.store.get(job_id) is None:
                    return
                continue
            last = events[-1].id
            record = self.apply_event(record, events[-1])
            yield last, record
            if record.terminal:
                return

    def apply_event(self, record: JobRecord, event: Event) -> JobRecord:
        """`record` as the feed entry `event` leaves it (read afresh where the entry does not carry it all)."""
        if event.state in (JobState.COMPLETED, JobState.FAILED, JobState.INPUT_REQUIRED):
            fresh = self.store.get(record.id)
            if fresh is not None:
                return fresh
        return dataclasses.replace(record, state=event.state, updated_ms=event.updated_ms,
                                   status_message=event.message, progress=event.progress, total=event.total)

    def wait(self, who: Principal | str, job_id: str, timeout_s: float) -> JobRecord:
        """The job once it is terminal or waiting for input, or as it stands when `timeout_s` runs out."""
        principal = as_principal(who)
        record = self.get(principal, job_id)
        for _, record in self.watch(principal, job_id, max_s=timeout_s, block_ms=int(min(timeout_s, 1) * 1000)):
            if record.terminal or record.state is JobState.INPUT_REQUIRED:
                break
        return record

