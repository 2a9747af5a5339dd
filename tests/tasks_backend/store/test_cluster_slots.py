"""Every script and every transaction the store sends touches the keys of one Redis Cluster slot.

A Redis Cluster refuses a command whose keys hash to different slots, and a script that touches a key it did
not declare may touch one on another node. Here the real store, limits and push-config code run one job's
whole life against the test Redis, every command on the wire is recorded, and the server itself
(`COMMAND GETKEYS`) says which keys each one names. Plain pipelines may span slots (a cluster client splits
them per node); one command, one script and one MULTI/EXEC may not. The cluster run of the suite
(`make test-cluster`) then runs the same code on a real three-primary cluster.
"""

from __future__ import annotations

import hashlib
import re
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.connection import HiredisRespSerializer, PythonRespSerializer
from redis.crc import key_slot

from tasks_backend.access.auth import Principal
from tasks_backend.model.domain import JobRecord, JobState
from tasks_backend.push.secrets import WebhookSecrets
from tasks_backend.push.subscriptions import Cursor, PushStore
from tasks_backend.running.catalog import publish
from tasks_backend.service.runtime import Runtime
from tasks_backend.store.admission import GateCall, GateLeave
from tasks_backend.store.admission import entry as gate_entry
from tasks_backend.store.claims import ClaimTerms
from tasks_backend.store.connect import NativePacker
from tasks_backend.store.fields import Change
from tasks_backend.store.jobs import ListPush
from tasks_backend.store.scripts import SCRIPTS

#: Every Lua script the product sends, by name: the job, push, catalog and limits scripts all live in `store/scripts/`.
ALL_SCRIPTS: dict[str, str] = dict(SCRIPTS)
#: The limits' scripts (`store/scripts/limits/`), which the life below runs through the limiter.
LIMITS = {"limits.rate", "limits.auth_fail", "limits.count", "limits.stream", "limits.charge"}
#: Commands a script may call without a key.
KEYLESS = {"TIME"}
#: Scripts sent only to a single Redis: the whole submit in one script, its keys in several slots (and the queue's,
#: when the broker is the same Redis: a cluster cannot be one); a run's end with the gate's leave (both ways), likewise.
ONE_SERVER_ONLY = {"submit", "gate.finish", "gate.finish_bypassed", "claim_fetched"}
#: Scripts that on a single Redis also write the schedules' due set (in a slot of its own), so that a schedule and
#: its due entry are written (or deleted) together; a cluster sends them the schedule's own keys alone.
ONE_SLOT_ON_A_CLUSTER = {"schedules.put", "schedules.state", "schedules.delete"}
#: Scripts only a worker's broker transport runs (tests/workers/test_broker.py), with kombu's keys beside the job's.
TRANSPORT_ONLY = {"claim_fetched"}
#: Scripts a single Redis does not need: the parts of a submit that a cluster runs one slot at a time, and a
#: schedule's due entry written apart from it.
CLUSTER_ONLY = {"create", "owner_index", "schedules.due"}


def test_scripts_touch_only_the_keys_they_declare() -> None:
    """A key built inside a script (from ARGV or a string) would escape the slot check of its KEYS."""
    assert {name for name in ALL_SCRIPTS if name.startswith("limits.")} == LIMITS
    for name, body in ALL_SCRIPTS.items():
        calls = re.findall(r"redis\.p?call\(\s*'([A-Za-z]+)'\s*(?:,\s*([^,)]+))?", body)
        assert calls, name
        for command, first in calls:
            if command.upper() not in KEYLESS:
                assert first.strip().startswith("KEYS["), f"{name}: {command} on {first!r}"


class Wire:
    """The commands sent to Redis by this thread, as packed (pipelines included)."""

    def __init__(self) -> None:
        self.commands: list[tuple[str, ...]] = []
        self.thread = threading.get_ident()
        self.depth = 0  # this thread's packers calling packers

    def record(self, args: tuple[Any, ...]) -> None:
        if threading.get_ident() == self.thread:
            self.commands.append(tuple(a.decode() if isinstance(a, bytes) else str(a) for a in args))


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Iterator[Wire]:
    seen = Wire()
    for serializer in (PythonRespSerializer, HiredisRespSerializer, NativePacker):
        original = serializer.pack

        def pack(self: Any, *args: Any, _original: Any = original) -> Any:
            mine = threading.get_ident() == seen.thread
            if mine and not seen.depth:  # once, where the store's packer hands a command on to redis-py's
                seen.record(args)
            seen.depth += mine
            try:
                return _original(self, *args)
            finally:
                seen.depth -= mine

        monkeypatch.setattr(serializer, "pack", pack)
    yield seen


def is_cluster(runtime: Runtime) -> bool:
    return not isinstance(runtime.store.redis, redis.Redis)


def one_life(runtime: Runtime) -> None:
    """Every store, limits, push-config and catalog call with a script or a transaction in it, once."""
    store, keys = runtime.store, runtime.store.keys
    owner, job_id = f"slots-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    fields = {"owner": owner, "op": "test.noop", "state": JobState.QUEUED.value, "ttl": "600000", "poll": "100",
              "params": "{}", "idem": "k1"}
    created, _ = store.create(fields, job_id, owner, idem_key="k1", idem_value=f"{job_id} h", ttl_ms=600_000,
                              sweep_in_ms=60_000)
    assert created is not None
    store.release_idempotency(owner, "k1", "not the value")  # WATCH, GET (and a MULTI if it held it)
    store.release_idempotency(owner, "k1", f"{job_id} h")
    outcome, _ = store.claim(job_id, ClaimTerms(5000, "w", 3))
    assert outcome == "ok"
    token = int(store.get(job_id).token or 0)  # type: ignore[union-attr]
    store.renew_many([(job_id, token)], lease_ms=5000)
    store.progress(job_id, token, message="half", done=1, total=2)
    store.record_step(job_id, token, "first", "1")
    store.transition(job_id, JobState.QUEUED, token=token, sweep_in_ms=60_000)
    store.provide_input(job_id, owner, {"q": "a"}, sweep_in_ms=60_000)
    store.request_cancel(job_id, owner)
    store.schedule_sweep(job_id, 0)
    _, due = store.due_for_sweep(1000)
    mine = [(i, score) for i, score in due if i == job_id]
    actions = store.sweep_many([job_id], grace_ms=1000, max_attempts=3, abandoned_error={"m": "x"}, backlog=(1, 0))
    store.settle_sweep([(job_id, mine[0][1] if mine else "0", None if actions[0][0] == "done" else 1)])

    other = str(uuid.uuid4())
    store.create({**fields, "idem": ""}, other, owner, idem_key=None, idem_value="", ttl_ms=600_000,
                 sweep_in_ms=60_000)
    store.transition(other, JobState.FAILED, owner=owner, change=Change(error_json="{}"))
    store.discard(other)
    waiter = str(uuid.uuid4())  # a job that sleeps, wakes, and is another's child
    store.create({**fields, "idem": ""}, waiter, owner, idem_key=None, idem_value="", ttl_ms=600_000,
                 sweep_in_ms=60_000)
    store.claim(waiter, ClaimTerms(5000, "w", 3))
    store.park(waiter, int(store.get(waiter).token), Change.waiting("Sleeping.", wake_ms=1), look_in_ms=0)  # type: ignore[union-attr]
    store.wake(waiter, None, "Resuming.", sweep_in_ms=60_000)
    store.index_child(job_id, waiter)
    assert store.adopt(waiter, store.now_ms() + 900_000) is False  # kept alive, as a rerun keeps a child
    _, woken = store.due_to_wake(100)
    store.settle_wakes([(i, score, None) for i, score in woken if i == waiter])
    # The waiter delegates to a remote agent: its task's reference, the remote schedule, the push key.
    store.remember_remote(waiter, "remote:0", {"protocol": "a2a", "url": "https://agent.example/a2a", "taskId": "t"},
                          0)
    assert [step for step, _ in store.open_remotes(waiter)] == ["remote:0"]
    _, polled = store.due_remotes(100)
    store.settle_remotes([(i, score, None) for i, score in polled if i == waiter])
    store.watch_remote(waiter, 60_000)
    assert store.remote_push_key()
    store.forget_remote(waiter, "remote:0")
    if not is_cluster(runtime):
        queue, third = f"slots-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
        push = ListPush(queue, "message", f"{queue}:pushes", 60_000)
        store.create({**fields, "idem": "k2"}, third, owner, idem_key="k2", idem_value=f"{third} h",
                     ttl_ms=600_000, sweep_in_ms=60_000, push=push)
        assert store.redis.rpop(queue) == "message"
        store.transition(third, JobState.FAILED, owner=owner, change=Change(error_json="{}"))

    gate = GateCall(fallback_slots=4, fair=True, ttl_ms=600_000, keys=tuple(keys.gate_keys("slots")))
    fourth = str(uuid.uuid4())
    info = gate_entry(keys.gate_owner(owner), 5, "test.noop", keys.gate_concurrency("test.noop", ""), 1)
    store.gate_admit(gate, fourth, info, "0")
    store.gate_admit(gate, fourth, "", "0", leave_first=True)
    store.gate_leave(gate, [fourth], final=True)
    store.gate_tick(gate, "w", 2, 30_000)
    store.gate_where(gate, [fourth])
    if not is_cluster(runtime):  # a run's end and the gate's leave in one script: a single Redis only
        fifth = str(uuid.uuid4())
        store.create({**fields, "idem": ""}, fifth, owner, idem_key=None, idem_value="", ttl_ms=600_000,
                     sweep_in_ms=60_000)
        store.transition(fifth, JobState.FAILED, owner=owner, change=Change(error_json="{}"), unschedule=False,
                         leave=GateLeave(gate, final=True))
        sixth = str(uuid.uuid4())  # and the short way, for a job sent past the gate (none here: only moved)
        store.create({**fields, "idem": ""}, sixth, owner, idem_key=None, idem_value="", ttl_ms=600_000,
                     sweep_in_ms=60_000)
        store.transition(sixth, JobState.FAILED, owner=owner, change=Change(error_json="{}"), unschedule=False,
                         leave=GateLeave(gate, final=True, lone=True))

    limiter, principal = runtime.limits(), Principal(owner)
    limiter.admit(principal, "192.0.2.7")  # the rate script and the address's check, in one round trip
    limiter.auth_failed("192.0.2.7")
    limiter.check_active(f"{owner}-2")  # without an admission: the count script
    limiter.active.prune(owner)
    limiter.open_stream(principal).close()
    limiter.charge(owner, 3)

    pushes = PushStore(store)
    record = store.get(job_id)
    assert isinstance(record, JobRecord)
    pushes.put(record, {"id": "c1", "url": "https://example.com/hook"}, after="0-0")
    now, _ = pushes.due(100)
    assert pushes.claim_many([job_id], "tok", 5000, now) == [job_id]
    pending = pushes.read(job_id, now)
    pushes.finish(pending, "tok", {"c1": Cursor(after="0-0", done=True)}, None)
    lock = pushes.try_claim(job_id, 5000)
    assert lock is not None
    pushes.release(job_id, lock)
    pushes.delete(job_id, "c1")
    WebhookSecrets(store).rotate(owner, 0)  # the owner's webhook secret
    assert publish(store.redis, keys, runtime.registry) > 0
    schedule_life(runtime, owner, job_id)
    store.put_link(job_id, "q", "a-link-token", "l1", store.now_ms() + 60_000)  # a one-time answer link, used once
    assert store.use_link("a-link-token").outcome == "ok"
    store.revoke_link(job_id, "q")
    assert keys.owner_index(owner)  # the owner's keys were all used above


def schedule_life(runtime: Runtime, owner: str, job_id: str) -> None:
    """Every schedule script once: define, take, claim, finish (marking a job), settle, pause, resume, delete."""
    service = runtime.schedules()
    service.define(owner, {"name": "slots", "operation": "test.noop", "everySeconds": 1})
    schedules = service.store
    schedules.take_due(0, 1000)  # takes nothing: other tests' schedules are left alone
    made = schedules.get(owner, "slots")
    assert made is not None
    assert schedules.claim_many([(made, [made.next_ms], made.next_ms + 1000)]) == [True]
    claimed = schedules.get(owner, "slots")
    assert claimed is not None
    assert schedules.finish_many([(claimed, claimed.pending, [(job_id, made.next_ms)])]) == [made.next_ms + 1000]
    schedules.settle([(owner, "slots", 0, made.next_ms + 1000)])
    service.pause(owner, "slots")
    service.resume(owner, "slots")
    service.delete(owner, "slots")


def test_every_script_and_transaction_stays_in_one_slot(runtime: Runtime, wire: Wire) -> None:
    one_life(runtime)
    sent = list(wire.commands)
    wire.thread = -1  # stop recording: what follows asks the server about what was sent
    store: Any = runtime.store.redis
    # Any server answers COMMAND GETKEYS; on a cluster, any of its nodes.
    probe: Any = store if isinstance(store, redis.Redis) else store.get_random_node().redis_connection

    def keys_of(command: tuple[str, ...]) -> list[str]:
        try:
            return [str(k) for k in probe.command_getkeys(*command)]
        except redis.ResponseError:  # a command without keys (PING, MULTI, TIME...)
            return []

    shas = {hashlib.sha1(body.encode()).hexdigest(): name for name, body in ALL_SCRIPTS.items()}
    ran: set[str] = set()
    transaction: list[str] | None = None
    watched: list[str] = []
    for command in sent:
        name = command[0].upper()
        keys = keys_of(command)
        if name in ("EVALSHA", "EVAL"):
            ran.add(shas.get(command[1], command[1]) if name == "EVALSHA" else "inline")
            if shas.get(command[1]) in ONE_SERVER_ONLY:
                assert not is_cluster(runtime)
                continue
            if shas.get(command[1]) in ONE_SLOT_ON_A_CLUSTER and not is_cluster(runtime):
                continue
        assert len({key_slot(k.encode()) for k in keys}) <= 1, f"{command[:6]} spans slots: {keys}"
        if name == "WATCH":
            watched += keys
        elif name == "MULTI":
            transaction = list(watched)
        elif name in ("EXEC", "DISCARD", "UNWATCH"):
            if transaction is not None:
                assert len({key_slot(k.encode()) for k in transaction}) <= 1, f"a transaction spans: {transaction}"
            transaction, watched = None, []
        elif transaction is not None:
            transaction += keys
    assert transaction is None
    expected = set(ALL_SCRIPTS) - (ONE_SERVER_ONLY if is_cluster(runtime) else CLUSTER_ONLY) - TRANSPORT_ONLY
    assert ran >= expected, f"scripts this life never ran: {sorted(expected - ran)}"
