"""The job store: the only module that reads or writes a job's keys in Redis.

Every state change is a script (`store.scripts`) run through `ScriptRunner`; Redis errors reach callers as
`StoreUnavailable` (see `connect.redis_errors`), never as a redis-py exception.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from ..errors import StoreUnavailable
from ..model.domain import TERMINAL_STATES, JobRecord, JobState, sources_of
from .admission import AdmissionStore, GateEntry, GateLeave, Released
from .admission import pairs as gate_pairs
from .claims import ClaimTerms, read_claim
from .connect import REDIS_DOWN, redis_errors
from .feeds import FeedReads
from .fields import CANCELLED_TOKEN, OPERATION, OWNER, STATE, TOKEN, Change, record
from .finished import FinishedReads, FinishedRecords
from .indexes import IndexPages
from .keys import Keys
from .operate import OperateStore
from .outcomes import Answered, Cancelled, Claimed, Moved, Standing, Stepped
from .questions import QuestionIndex
from .remotes import RemoteWatch
from .runner import ScriptRunner, new_request_id
from .scripts import SCRIPTS
from .sweeps import SweepSchedule
from .waits import Waits


@dataclass(frozen=True)
class ListPush:
    """A message for a Redis list, and the counter that counts the pushes onto it (see `create`)."""

    queue: str
    item: str
    counter: str
    #: Renew the counter's TTL to this with the push; None: its owner renewed it recently.
    counter_ttl_ms: int | None


class RedisStore(FeedReads, FinishedReads, IndexPages, SweepSchedule, Waits, AdmissionStore, OperateStore,
                 QuestionIndex, RemoteWatch):
    def __init__(self, client: redis.Redis, keys: Keys, *, max_ttl_ms: int,
                 replicas: tuple[int, int] = (0, 0)) -> None:
        # redis-py's return types are unions over its sync/async and bytes/str modes; with
        # decode_responses=True every reply here is str, so the client is used untyped.
        self.redis: Any = client
        self.keys = keys
        self.max_ttl_ms = max_ttl_ms
        #: (replicas a new job must reach before `create` returns, within this many ms): Redis `WAIT`.
        self.replicas = replicas
        self.scripts = ScriptRunner(client, SCRIPTS)
        #: One Redis (with or without Sentinel), not a Cluster: a script may touch keys of any slot.
        self.single = isinstance(client, redis.Redis)
        self.finished = FinishedRecords(self.now_ms)

    # -- script plumbing -------------------------------------------------------
    def _run(self, build: Callable[[Any], None], *, in_order: bool = False) -> list[Any]:
        """Run `build(pipeline)` as one round trip (see `ScriptRunner.run`)."""
        return self.scripts.run(build, in_order=in_order)

    def _eval(self, pipe: Any, name: str, keys: Sequence[str], *args: Any) -> None:
        self.scripts.queue(pipe, name, keys, *args)

    def _job(self, name: str, job_id: str, *args: Any) -> Any:
        """One script on one job's keys: a plain command, which costs less than a pipeline of one."""
        return self.scripts.call(name, self.keys.job_keys(job_id), *args)

    # -- create and read -------------------------------------------------------
    def create(self, new: dict[str, str], job_id: str, owner: str, *, idem_key: str | None, idem_value: str,
               ttl_ms: int, sweep_in_ms: int, request_id: str | None = None,
               push: ListPush | None = None, gate: GateEntry | None = None,
               released: Released | None = None) -> tuple[int | None, str | None]:
        """Write a new job, index it for its owner and the sweeper, in one round trip.

        Returns (createdAt in ms, None) when created: the time is Redis's, and the script sets `created`
        and `updated` to it. When another request holds the idempotency key, the second item is the value
        stored under it (the job written here is then an unindexed orphan, which the caller must
        `discard`). A createdAt of None means the id was taken (pick another). The owner index orders
        by Redis's clock to the microsecond, so one client's quick submissions list in the order made.
        `push` (the enqueue, when the broker is this Redis) rides in the same round trip: with an
        idempotency key, it is pushed only if the key is this request's, so a job that lost the key is
        never enqueued. On a single Redis all of it is one script (`submit.lua`), the gate's admission
        (`gate`; what it released is added to `released`) included; a Redis Cluster, which is never the
        broker, runs one script per slot, and its caller admits the job to the gate afterwards.
        """
        rid = request_id or new_request_id()
        # The script reads the state from the first pair.
        pairs = [STATE, new[STATE], *(x for k, v in new.items() if k != STATE for x in (k, v))]
        job_keys = self.keys.job_keys(job_id)[:2]
        index, sweep = self.keys.owner_index(owner), self.keys.sweep()
        idem = None if idem_key is None else self.keys.idempotency(owner, idem_key)

        if gate is not None and push is not None:
            raise ValueError("with the gate, the push rides in the gate's call")
        gpush = gate.call.push if gate is not None else None

        def submit_call() -> tuple[list[str], list[Any]]:
            keys = [*job_keys, index, sweep, *([idem] if idem else []),
                    *([push.queue, push.counter] if push else []), *(gate.call.push_keys() if gate else []),
                    *(gate.call.keys if gate else [])]
            message = push.item if push else ("1" if gpush else "")
            counter_ttl = gpush[2] if gpush else (
                "" if push is None or push.counter_ttl_ms is None else push.counter_ttl_ms)
            gate_args = [gate.info, gate.delay, *gate.call.head()[:2]] if gate else ["", "", "", ""]
            return keys, [job_id, self.max_ttl_ms, idem_value if idem else "", sweep_in_ms, message, counter_ttl,
                          *gate_args, rid, ttl_ms, *pairs]

        def build(p: Any) -> None:
            if self.single:
                keys, args = submit_call()
                self._eval(p, "submit", keys, *args)
            else:
                assert push is None and gate is None, "a Redis Cluster is never the broker; its gate call is apart"
                self._eval(p, "create", job_keys, rid, ttl_ms, *pairs)
                self._eval(p, "owner_index", [index, *([idem] if idem else [])], job_id, self.max_ttl_ms, idem_value,
                           ttl_ms, self.max_ttl_ms)
                self._schedule_in(p, sweep, [(job_id, sweep_in_ms)])
            if self.replicas[0]:  # last: it waits for everything above to reach the replicas
                p.execute_command("WAIT", *self.replicas)

        if self.single and not self.replicas[0]:
            keys, args = submit_call()
            reply = [self.scripts.call("submit", keys, *args)]  # a plain command costs less than a pipeline of one
        else:
            reply = self._run(build)
        created, existing = reply[0][:2] if self.single else reply[:2]
        if released is not None and self.single:
            released.extend(gate_pairs(reply[0][2:]))
        if self.replicas[0] and int(reply[-1]) < self.replicas[0]:
            # Not on enough replicas to survive a failover: never handed out. Its message, if it was
            # enqueued, then finds no job; a retry with the same idempotency key submits afresh.
            if created is not None:
                self.discard(job_id)
            raise StoreUnavailable("The job could not be copied to a replica in time; retry later.")
        return (None if created is None else int(created)), (existing if existing is not None else None)

    def discard(self, job_id: str) -> None:
        """Remove a job that was never handed out (it lost an idempotency race)."""
        with redis_errors():
            pipe = self.redis.pipeline(transaction=False)
            pipe.delete(*self.keys.job_keys(job_id))
            pipe.zrem(self.keys.sweep(), job_id)
            pipe.execute()

    def get(self, job_id: str) -> JobRecord | None:
        with redis_errors():
            raw = self.redis.hgetall(self.keys.job(job_id))
        return record(job_id, raw) if raw else None

    def get_with_meta(self, job_id: str, field: str) -> tuple[JobRecord | None, str | None]:
        """The job and one field of its adapter metadata (see `job_meta`), in one round trip."""
        with redis_errors():
            pipe = self.redis.pipeline(transaction=False)
            pipe.hgetall(self.keys.job(job_id))
            pipe.hget(self.keys.job_meta(job_id), field)
            raw, value = pipe.execute()
        return (record(job_id, raw) if raw else None), (value if isinstance(value, str) else None)

    def get_many(self, job_ids: Sequence[str]) -> list[JobRecord | None]:
        if not job_ids:
            return []
        with redis_errors():
            pipe = self.redis.pipeline(transaction=False)
            for job_id in job_ids:
                pipe.hgetall(self.keys.job(job_id))
            rows = pipe.execute()
        return [record(i, r) if r else None for i, r in zip(job_ids, rows, strict=True)]

    def idempotency_value(self, owner: str, key: str) -> str | None:
        with redis_errors():
            value = self.redis.get(self.keys.idempotency(owner, key))
        return value if isinstance(value, str) else None

    def release_idempotency(self, owner: str, key: str, value: str) -> None:
        """Delete a stale idempotency record, only if it still holds `value`."""
        k = self.keys.idempotency(owner, key)
        with redis_errors(), self.redis.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(k)
                if pipe.get(k) == value:
                    pipe.multi()
                    pipe.delete(k)
                    pipe.execute()
            except redis.WatchError:
                pass

    def states_of(self, job_ids: Sequence[str]) -> list[JobState | None]:
        """Each job's state (None: gone), in one round trip."""
        return job_states(self.redis, self.keys, job_ids)

    def owners_of(self, job_ids: Sequence[str]) -> list[str | None]:
        """Each job's owner (None: gone), in one round trip."""
        return [None if o is None else str(o) for o in _field_of_many(self.redis, self.keys, job_ids, OWNER)]

    def operations_of(self, job_ids: Sequence[str]) -> list[str | None]:
        """Each job's operation (None: gone), in one round trip."""
        return [None if o is None else str(o) for o in _field_of_many(self.redis, self.keys, job_ids, OPERATION)]

    def queue_get(self, pipe: Any, job_id: str) -> Callable[[Any], JobRecord | None]:
        """Read the job in `pipe` (a caller's own round trip or transaction); returns the parser of its reply."""
        pipe.hgetall(self.keys.job(job_id))
        return lambda raw: record(job_id, raw) if raw else None

    # -- state changes -----------------------------------------------------------
    # Every script that changes a job takes a request id (a fresh one unless the caller passes its
    # own, to retry one request across a longer outage): a replay of the same request answers what the
    # first run did. Times are Redis's own (see `scripts`).
    def transition(self, job_id: str, target: JobState, *, token: int | None = None, owner: str = "",
                   change: Change | None = None, unschedule: bool = True, sweep_in_ms: int | None = None,
                   request_id: str | None = None, leave: GateLeave | None = None,
                   wake_in_ms: int | None = None) -> tuple[Moved, str, int]:
        """Move a job to `target` if the state table allows it (and the token still fences it), writing `change`.

        Returns (outcome, state before, Redis time of the change or 0): ok | missing | fenced | cancelled
        (the owner cancelled this token's run) | illegal. A job that leaves the queue for good (finished)
        is taken off the sweep schedule in the same round trip; `unschedule=False` leaves that to the
        caller (workers batch it, see `unschedule_finished`). A move into `queued` must pass
        `sweep_in_ms`: the sweep entry is then written in the same round trip, before the script; so is the wake
        schedule's entry with `wake_in_ms` (a question's deadline, see `running.waking`). `leave` (a single
        Redis, a run's end without either): the job leaves the dispatch gate in the same script
        (`AdmissionStore.gate_finish`, or with `leave.lone` first `gate_finish_bypassed`, which does nothing when the
        gate holds more for the job than a bypassed job's entry); otherwise `leave.taken` stays false and the caller
        leaves it."""
        args = [request_id or new_request_id(), "" if token is None else token, target.value,
                ",".join(sources_of(target)), owner, *(change.pairs() if change else ())]
        if target is JobState.QUEUED and sweep_in_ms is None:
            raise ValueError("a move into queued needs its sweep entry")
        drop = unschedule and target in TERMINAL_STATES
        if leave is not None and not drop and sweep_in_ms is None and wake_in_ms is None:
            short = self.gate_finish_bypassed(leave.call, job_id, args) if leave.lone and leave.final else None
            if short is not None:
                leave.taken, leave.bypassed = True, True
                return short
            outcome, before, at, leave.released, leave.bypassed = self.gate_finish(leave.call, job_id, args,
                                                                                   final=leave.final)
            leave.taken = True
            return outcome, before, at
        if not drop and sweep_in_ms is None and wake_in_ms is None:
            outcome, before, at = self._job("transition", job_id, *args)
            return Moved(outcome), str(before), int(at)

        def build(p: Any) -> None:
            if sweep_in_ms is not None:
                self._schedule_in(p, self.keys.sweep(), [(job_id, sweep_in_ms)])
            if wake_in_ms is not None:
                self._schedule_in(p, self.keys.wake(), [(job_id, max(0, wake_in_ms))])
            self._eval(p, "transition", self.keys.job_keys(job_id), *args)
            if drop:
                p.zrem(self.keys.sweep(), job_id)

        before_script = (sweep_in_ms is not None) + (wake_in_ms is not None)
        outcome, before, at = self._run(build, in_order=before_script > 0)[before_script]
        return Moved(outcome), str(before), int(at)

    def unschedule_finished(self, job_ids: Sequence[str], also: Callable[[Any], None] | None = None) -> None:
        """Take finished jobs off the sweep schedule in one command; `also` adds to the round trip.

        Only for jobs in a terminal state: nothing schedules them again."""
        def build(p: Any) -> None:
            if job_ids:
                p.zrem(self.keys.sweep(), *job_ids)
            if also is not None:
                also(p)

        self._run(build)

    def claim(self, job_id: str, terms: ClaimTerms, *,
              request_id: str | None = None) -> tuple[Claimed, JobRecord | None]:
        """Take the job for a worker; on "ok" the record comes back in the same reply.

        The job's sweep entry (made when it was queued) is left as it is: when it comes due the sweeper
        finds the lease and looks again when it would lapse, which is how a dead worker is noticed."""
        return read_claim(job_id, self._job("claim", job_id, *terms.args(request_id)))

    def renew_many(self, leases: Sequence[tuple[str, int]], *, lease_ms: int) -> list[Standing]:
        """Renew several leases in one round trip: each worker's standing on its job."""
        def build(p: Any) -> None:
            for job_id, token in leases:
                self._eval(p, "renew", self.keys.job_keys(job_id), token, lease_ms)

        return [Standing(int(x)) for x in self._run(build)]

    def progress(self, job_id: str, token: int, *, message: str | None, done: float | None,
                 total: float | None) -> Standing:
        """Record progress; returns the worker's standing on the job."""
        def text(v: float | str | None) -> str:
            return "" if v is None else str(v)

        return Standing(int(self._job("progress", job_id, token, text(message), text(done), text(total))))

    def record_step(self, job_id: str, token: int, name: str, value_json: str) -> tuple[Stepped, str]:
        """Record a step's value: ok | exists (with the value recorded first) | fenced | cancelled."""
        outcome, value = self._job("step", job_id, token, name, value_json)
        return Stepped(outcome), str(value)

    def recorded_step(self, job_id: str, name: str) -> str | None:
        with redis_errors():
            value = self.redis.hget(self.keys.steps(job_id), name)
        return value if isinstance(value, str) else None

    def answers(self, job_id: str, keys: Sequence[str]) -> dict[str, str]:
        with redis_errors():
            values = self.redis.hmget(self.keys.answers(job_id), list(keys))
        return {k: v for k, v in zip(keys, values, strict=True) if isinstance(v, str)}

    def standing_of(self, job_id: str, token: int) -> Standing:
        """The standing of the holder of `token` on the job: its run was cancelled, it holds the job (carry on),
        or it lost the job (lapsed lease, expiry, another worker). Reads only: renews nothing."""
        with redis_errors():
            state, current, cancelled = self.redis.hmget(self.keys.job(job_id), [STATE, TOKEN, CANCELLED_TOKEN])
        if state == JobState.CANCELLED and cancelled == str(token):
            return Standing.CANCELLED
        if state == JobState.RUNNING and current == str(token):
            return Standing.CARRY_ON
        return Standing.LOST

    def request_cancel(self, job_id: str, owner: str, *, request_id: str | None = None) -> Cancelled:
        """Cancel the job now: cancelled | terminal (already finished) | missing."""
        return Cancelled(self._job("cancel", job_id, request_id or new_request_id(), owner))

    def provide_input(self, job_id: str, owner: str, answers: dict[str, str], *, sweep_in_ms: int,
                      request_id: str | None = None, by: str | None = None,
                      address: str = "") -> tuple[Answered, int]:
        """Record answers: (queued | waiting | conflict | missing, questions still open).

        The job is put on the sweep schedule (due in `sweep_in_ms`) in the same round trip, before the
        script: a job the answers move to `queued` is never without an entry, whatever happens to the
        caller next. (The sweeper drops the entry of a job that stayed parked.) `by` (default: the owner) and
        `address` are noted with each answer recorded (`answered_by`)."""
        rid = request_id or new_request_id()
        pairs = [x for kv in answers.items() for x in kv]

        def build(p: Any) -> None:
            self._schedule_in(p, self.keys.sweep(), [(job_id, sweep_in_ms)])
            self._eval(p, "input", self.keys.job_keys(job_id), rid, owner, by or owner, address, *pairs)

        outcome, still_open = self._run(build, in_order=True)[1]
        return Answered(outcome), int(still_open)

    def _schedule_in(self, pipe: Any, key: str, entries: Sequence[tuple[str, int]]) -> None:
        self._eval(pipe, "schedule", [key], self.max_ttl_ms, *(x for job_id, ms in entries for x in (ms, job_id)))

    def try_lock(self, name: str, ttl_ms: int) -> bool:
        with redis_errors():
            return bool(self.redis.set(self.keys.lock(name), "1", nx=True, px=ttl_ms))

    def ping(self) -> bool:
        try:
            return bool(self.redis.ping())
        except (*REDIS_DOWN, redis.RedisError):
            return False


def job_states(client: Any, keys: Keys, job_ids: Sequence[str]) -> list[JobState | None]:
    """Each job's state (None: gone), in one round trip, for a caller that holds a client but no store."""
    return [None if s is None else JobState(s) for s in _field_of_many(client, keys, job_ids, STATE)]


def _field_of_many(client: Any, keys: Keys, job_ids: Sequence[str], name: str) -> list[Any]:
    if not job_ids:
        return []
    with redis_errors():
        pipe = client.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hget(keys.job(job_id), name)
        return list(pipe.execute())
