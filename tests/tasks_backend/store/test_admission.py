"""The dispatch gate's store side (`store/admission.py`, `scripts/lib/gate.lua`) against a real Redis: the slot
total it caches, a run's end that leaves the gate in its last transition, and what it keeps of a job."""

from __future__ import annotations

import json
import uuid

import pytest

from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import build_runtime
from tasks_backend.store.admission import GateCall, GateEntry, GateLeave
from tasks_backend.store.admission import entry as gate_entry
from tasks_backend.store.claims import ClaimTerms
from tasks_backend.store.fields import Change
from tasks_backend.store.jobs import RedisStore
from tests.conftest import make_settings, single_redis, wait_until

OWNER = "alice"


@pytest.fixture
def store(redis_base: str) -> RedisStore:
    return build_runtime(make_settings(single_redis(redis_base))).store


def gate_of(store: RedisStore, fallback: int = 1) -> GateCall:
    """A gate of its own (a fresh queue name), that returns what it releases instead of pushing it."""
    return GateCall(fallback, True, 600_000, tuple(store.keys.gate_keys(f"q-{uuid.uuid4().hex[:8]}")))


def info(store: RedisStore, message: str = "test.noop") -> str:
    return gate_entry(store.keys.gate_owner(OWNER), 5, message)


def submit(store: RedisStore, call: GateCall) -> tuple[str, list[tuple[str, str]]]:
    """A new job, admitted in its submit's script: (its id, what the gate released)."""
    job_id, released = str(uuid.uuid4()), []
    fields = {"owner": OWNER, "op": "test.noop", "state": JobState.QUEUED.value, "ttl": "600000", "poll": "100",
              "params": "{}"}
    store.create(fields, job_id, OWNER, idem_key=None, idem_value="", ttl_ms=600_000, sweep_in_ms=60_000,
                 gate=GateEntry(call, info(store, f"msg-{job_id}"), "0"), released=released)
    return job_id, released


def flight(store: RedisStore, call: GateCall) -> set[str]:
    return {str(x) for x in store.redis.zrange(call.key("flight"), 0, -1)}


def test_a_workers_slots_leave_the_total_when_its_publish_expires_with_no_tick_between(store: RedisStore) -> None:
    call = gate_of(store)
    store.gate_tick(call, "steady", 2, 600_000)
    now, _, _ = store.gate_tick(call, "dying", 3, 300)  # a worker that publishes once, then dies
    admitted = [store.gate_admit(call, str(i), info(store), "0") for i in range(6)]
    assert sum(len(released) for _, released in admitted) == 5  # 2 + 3 slots; the sixth is held
    wait_until(lambda: store.gate_tick(gate_of(store))[0] > now + 300, message="the dying worker's publish expired")
    # No tick of this gate ran since: the first call after the expiry counts the slots again (2 now).
    assert store.gate_leave(call, ["0", "1", "2"], final=True) == []
    assert store.gate_leave(call, ["3"], final=True) == [("5", "test.noop")]
    assert flight(store, call) == {"4", "5"}


def test_a_runs_end_applied_twice_gives_its_slot_back_once(store: RedisStore) -> None:
    """The run parks for input (leaving flight in that transition); by the time its reply is replayed the job was
    admitted again and is in flight once more: the replay must not take it out (a slot counted free twice)."""
    call = gate_of(store, fallback=1)
    first, released = submit(store, call)
    assert [job for job, _ in released] == [first]
    second, held = submit(store, call)
    third, _ = submit(store, call)
    assert held == [] and flight(store, call) == {first}
    store.claim(first, ClaimTerms(5000, "w", 3))
    token = int(store.get(first).token or 0)  # type: ignore[union-attr]

    def park() -> tuple[str, list[tuple[str, str]]]:
        leave = GateLeave(call, final=False)
        outcome, _, _ = store.transition(first, JobState.INPUT_REQUIRED, token=token, request_id="park-1",
                                         change=Change.parked("[]", "A question."), leave=leave)
        return outcome, leave.released

    assert park() == ("ok", [(second, f"msg-{second}")])
    assert store.gate_leave(call, [second], final=True) == [(third, f"msg-{third}")]
    assert store.gate_admit(call, first, "", "0", message=f"msg-{first}") == (True, [])  # answered: held
    assert store.gate_leave(call, [third], final=True) == [(first, f"msg-{first}")]
    assert park() == ("ok", [])  # the replay: no second leave
    assert flight(store, call) == {first}
    assert [where for where, _ in store.gate_where(call, [first, second, third])] == ["f", None, None]


def test_a_job_let_through_keeps_no_message_and_a_readmission_brings_its_own(store: RedisStore) -> None:
    call = gate_of(store, fallback=1)
    first, _ = submit(store, call)
    second, _ = submit(store, call)
    assert str(store.redis.hget(call.key("jobs"), first)).endswith("|")  # in flight: no message kept
    assert str(store.redis.hget(call.key("jobs"), second)).endswith(f"|msg-{second}")  # held: its message kept
    # The first run parks (a question): it leaves flight, the second goes; then the answer admits the first again.
    assert store.gate_leave(call, [first], final=False) == [(second, f"msg-{second}")]
    known, released = store.gate_admit(call, first, "", "0", message=f"again-{first}")
    assert known and released == []  # held behind the second, with the message it was given
    assert store.gate_leave(call, [second], final=True) == [(first, f"again-{first}")]


def test_an_entry_written_as_json_before_the_upgrade_still_leaves_and_releases(store: RedisStore) -> None:
    call = gate_of(store, fallback=1)
    owner = store.keys.gate_owner(OWNER)
    store.redis.hset(call.key("jobs"), mapping={
        "old-f": json.dumps({"o": owner, "p": 5, "c": "", "m": 0, "x": "op", "t": "f"}),
        "old-h": json.dumps({"o": owner, "p": 5, "c": "", "m": 0, "x": "op-h", "t": "h",
                             "k": f"{owner}:4:{7:013d}:old-h"})})
    store.redis.zadd(call.key("flight"), {"old-f": 1})
    store.redis.zadd(call.key("ready"), {f"{owner}:4:{7:013d}:old-h": 0})
    store.redis.zadd(call.key("ring"), {owner: 0})
    assert store.gate_leave(call, ["old-f"], final=True) == [("old-h", "op-h")]
    assert flight(store, call) == {"old-h"} and store.redis.zcard(call.key("ready")) == 0


def test_a_gate_that_pushes_itself_pushes_only_broker_messages(store: RedisStore) -> None:
    """Processes of one deployment may differ in whether their gate pushes (a broker setting that changed, a tool
    with its own dispatcher): entries that hold an operation, or nothing, are handed back to be published, never
    pushed onto the queue, where a worker could not decode them."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    keys = tuple(store.keys.gate_keys(queue))
    kept_by_other = GateCall(1, True, 600_000, keys)
    pushing = GateCall(1, True, 600_000, keys, (queue, f"{queue}:pushes", "", store.keys.bypass_queue(queue),
                                                        f"{queue}:bypass-pushes"))
    message = json.dumps({"body": "", "headers": {"id": "m", "shadow": "test.noop"}})
    _, first = store.gate_admit(kept_by_other, "a", info(store, "test.noop"), "0")
    assert first == [("a", "test.noop")]
    store.gate_admit(kept_by_other, "b", info(store, "test.noop"), "0")  # held, keeping its operation
    store.gate_admit(pushing, "c", info(store, message), "0")  # held, keeping its message
    assert store.gate_leave(pushing, ["a"], final=True) == [("b", "test.noop")]
    assert store.redis.llen(queue) == 0
    assert store.gate_leave(pushing, ["b"], final=True) == []
    assert [json.loads(m) for m in store.redis.lrange(queue, 0, -1)] == [json.loads(message)]
    # A job out of the gate keeps nothing; admitted again with no message, it is handed back with none.
    store.gate_leave(pushing, ["c"], final=False)
    known, released = store.gate_admit(pushing, "c", "", "0")
    assert known and released == [("c", "")]
    assert store.redis.llen(queue) == 1


def test_owners_stuck_on_a_full_concurrency_value_do_not_hold_back_the_owners_behind_them(store: RedisStore) -> None:
    """The pump reads the ring 64 owners at a time: with more owners than that waiting on a full value at its head,
    an owner behind them with a job that could run is still reached while slots are free."""
    call = gate_of(store, fallback=2)
    value = store.keys.gate_concurrency("test.limited", "")

    def limited(owner: str) -> str:
        return gate_entry(store.keys.gate_owner(owner), 5, "test.limited", value, 1)

    def plain(owner: str) -> str:
        return gate_entry(store.keys.gate_owner(owner), 5, "test.noop")

    stuck = [f"x-{i}" for i in range(1, 67)]
    # Owners that come in at one turn sort by their names in the gate: z's sorts after all of theirs.
    z = next(name for name in (f"z-{i}" for i in range(10_000))
             if store.keys.gate_owner(name) > max(store.keys.gate_owner(x) for x in stuck))
    assert store.gate_admit(call, "x-0", limited("x-0"), "0")[1] == [("x-0", "test.limited")]  # the value is full
    assert store.gate_admit(call, "z-1", plain(z), "0")[1] == [("z-1", "test.noop")]  # the 2 slots are taken
    for x in stuck:  # each waiting on the full value
        assert store.gate_admit(call, x, limited(x), "0")[1] == []
    assert store.gate_admit(call, "z-2", plain(z), "0")[1] == []
    assert store.redis.zrange(call.key("ring"), -1, -1) == [store.keys.gate_owner(z)]  # last of 67
    # A worker with 10 slots publishes: 8 free, and only z's job can take one.
    _, _, released = store.gate_tick(call, "w", 10, 600_000)
    assert released == [("z-2", "test.noop")]
    assert flight(store, call) == {"x-0", "z-1", "z-2"}


def test_an_owners_job_on_a_free_value_is_not_held_behind_its_jobs_on_a_full_one(store: RedisStore) -> None:
    """However many of an owner's held jobs wait on a full concurrency value ahead of it, its job on another value
    takes a free slot at once; those set aside go back to their places as their value frees, first in, first out,
    and leave with the job when one is cancelled while it waits."""
    call = gate_of(store, fallback=4)
    owner = store.keys.gate_owner(OWNER)
    full, free = (store.keys.gate_concurrency("test.limited", v) for v in ('"a"', '"b"'))

    def limited(value: str, priority: int = 5) -> str:
        return gate_entry(owner, priority, "test.limited", value, 1)

    assert store.gate_admit(call, "a-0", limited(full), "0")[1] == [("a-0", "test.limited")]
    waiting = [f"a-{i}" for i in range(1, 121)]
    for job_id in waiting:
        assert store.gate_admit(call, job_id, limited(full), "0")[1] == []
    assert store.gate_admit(call, "b-0", limited(free, priority=1), "0")[1] == [("b-0", "test.limited")]
    assert flight(store, call) == {"a-0", "b-0"}
    assert store.gate_figures(call, 0).held == 120  # set aside is still held
    store.gate_leave(call, [waiting[5]], final=True)  # cancelled while it waits
    # The value frees: the first of those set aside runs next, then the next, in the order they came.
    order = []
    running = "a-0"
    for _ in range(3):
        (running, _), = store.gate_leave(call, [running], final=True)
        order.append(running)
    assert order == waiting[:3]
    assert store.gate_figures(call, 0).held == 116
    places = dict(zip(waiting[3:], (where for where, _ in store.gate_where(call, waiting[3:])), strict=True))
    assert places.pop(waiting[5]) is None and set(places.values()) == {"h"}
    # The value's count lost with its job in flight (a key expired, say): the tick puts the next one back.
    store.redis.zrem(call.key("flight"), running)
    store.redis.hdel(call.key("conc"), full)
    assert store.gate_tick(call)[2] == [(waiting[3], "test.limited")]


@pytest.mark.parametrize("flood_sorts_first", [True, False])
def test_owners_waiting_on_one_full_value_take_turns_with_it(store: RedisStore, flood_sorts_first: bool) -> None:
    """A value shared by owners (a limit on the whole operation): as it frees, each owner waiting on it gets its
    turn, whatever their names; one that floods does not keep another waiting for its whole queue."""
    call = gate_of(store, fallback=8)
    shared = store.keys.gate_concurrency("test.limited", "")
    first, second = sorted(["flood", "other"], key=store.keys.gate_owner, reverse=not flood_sorts_first)

    def limited(owner: str) -> str:
        return gate_entry(store.keys.gate_owner(owner), 5, "test.limited", shared, 1)

    assert store.gate_admit(call, f"{first}-0", limited(first), "0")[1] == [(f"{first}-0", "test.limited")]
    for i in range(1, 100):
        assert store.gate_admit(call, f"{first}-{i}", limited(first), "0")[1] == []
    assert store.gate_admit(call, f"{second}-0", limited(second), "0")[1] == []
    assert store.gate_admit(call, f"{second}-1", limited(second), "0")[1] == []
    running, order = f"{first}-0", []
    for _ in range(6):
        (running, _), = store.gate_leave(call, [running], final=True)
        order.append(running)
    # One each in turn (whichever starts), each owner's in order.
    assert sorted(order[:4]) == sorted([f"{first}-1", f"{first}-2", f"{second}-0", f"{second}-1"]), order
    assert order[0].split("-")[0] != order[1].split("-")[0] != order[2].split("-")[0], order
    assert [j for j in order if j.startswith(second)] == [f"{second}-0", f"{second}-1"]
    assert [j for j in order if j.startswith(first)] == [f"{first}-{i}" for i in range(1, 5)]


def set_aside(store: RedisStore, call: GateCall) -> list[str]:
    return [str(m) for m in store.redis.zrangebylex(call.key("ready"), "[~", "+")]


def test_an_owners_jobs_on_one_value_keep_their_order_with_some_set_aside(store: RedisStore) -> None:
    """A job of an owner admitted on a value after an earlier one of its own was set aside there does not pass it
    when the value frees, whichever owner's job was put back."""
    call = gate_of(store, fallback=2)
    value = store.keys.gate_concurrency("test.limited", '"v"')
    names = sorted(["alice", "bob", "carol", "dave"], key=store.keys.gate_owner)
    b, a, x, y = names  # b's name sorts before a's: the value's first put-back is b's

    def limited(owner: str) -> str:
        return gate_entry(store.keys.gate_owner(owner), 5, "test.limited", value, 1)

    def plain(owner: str) -> str:
        return gate_entry(store.keys.gate_owner(owner), 5, "test.noop")

    sent = [job for job_id, entry in (("a0", limited(a)), ("a1", limited(a)), ("b1", limited(b)), ("x1", plain(x)),
                                      ("a2", limited(a)), ("y1", plain(y)))
            for job, _ in store.gate_admit(call, job_id, entry, "0")[1]]
    assert sent == ["a0", "x1"]
    running = {"a0", "x1"}
    for _ in range(6):
        if not running:
            break
        done = sorted(running)[0]
        running.discard(done)
        for job, _ in store.gate_leave(call, [done], final=True):
            sent.append(job)
            running.add(job)
    mine = [job for job in sent if job.startswith("a")]
    assert mine == ["a0", "a1", "a2"], sent


def test_a_job_put_back_and_cancelled_before_it_was_sent_hands_its_room_on(store: RedisStore) -> None:
    """Its value's job ends while every slot is taken: the first set aside goes back but waits; it is cancelled
    there, and the next set aside goes back in its stead (else nothing of that value would end to put it back)."""
    call = gate_of(store, fallback=3)
    value = store.keys.gate_concurrency("test.limited", '"v"')

    def limited(owner: str) -> str:
        return gate_entry(store.keys.gate_owner(owner), 5, "test.limited", value, 1)

    assert store.gate_admit(call, "f", limited("alice"), "0")[1] == [("f", "test.limited")]
    for job_id in ("s1", "s2"):
        assert store.gate_admit(call, job_id, limited("alice"), "0")[1] == []
    assert len(set_aside(store, call)) == 2
    for job_id in ("p1", "p2"):
        assert store.gate_admit(call, job_id, gate_entry(store.keys.gate_owner("bob"), 5, "test.noop"), "0")[1]
    store.gate_tick(call, "w", 2, 600_000)  # two slots now, three in flight
    assert store.gate_leave(call, ["f"], final=True) == []  # s1 goes back, but no slot is free
    assert len(set_aside(store, call)) == 1
    store.gate_leave(call, ["s1"], final=True)  # cancelled while it waits
    assert set_aside(store, call) == []
    assert store.gate_leave(call, ["p1"], final=True) == [("s2", "test.limited")]


def test_the_tick_walks_every_value_with_jobs_set_aside_in_turn(store: RedisStore) -> None:
    """A value freed with nothing of it left to end is found by the tick, however many jobs wait set aside on a
    full value that sorts before it; a tick looks at 20 values, the next goes on from there."""
    call = gate_of(store, fallback=500)
    names = sorted(store.keys.gate_concurrency("test.limited", f'"{i}"') for i in range(200))
    busy, freed = names[0], names[1:26]

    def limited(value: str) -> str:
        return gate_entry(store.keys.gate_owner("alice"), 5, "test.limited", value, 1)

    assert store.gate_admit(call, "busy-run", limited(busy), "0")[1]
    for i in range(150):
        assert store.gate_admit(call, f"busy-{i}", limited(busy), "0")[1] == []
    for i, value in enumerate(freed):
        assert store.gate_admit(call, f"run-{i}", limited(value), "0")[1]
        assert store.gate_admit(call, f"wait-{i}", limited(value), "0")[1] == []
    assert len(set_aside(store, call)) == 175
    # The freed values' counts lost with their jobs in flight: only the tick can find them.
    store.redis.hdel(call.key("conc"), *freed)
    store.redis.zrem(call.key("flight"), *(f"run-{i}" for i in range(25)))
    first = {job for job, _ in store.gate_tick(call)[2]}
    assert len(first) == 19  # the busy value and 19 others
    second = {job for job, _ in store.gate_tick(call)[2]}
    assert first | second == {f"wait-{i}" for i in range(25)}
    assert len(set_aside(store, call)) == 150  # the busy value's, still full


def test_a_retry_that_waits_gives_its_slot_to_a_held_job_at_once(store: RedisStore) -> None:
    call = gate_of(store, fallback=1)
    first, _ = submit(store, call)
    other = str(uuid.uuid4())
    assert store.gate_admit(call, other, gate_entry(store.keys.gate_owner("bob"), 5, "test.noop"), "0")[1] == []
    # The first job's run fails and is retried in 5 s: it leaves flight and waits; bob's job takes the slot now.
    known, released = store.gate_admit(call, first, "", "5000", leave_first=True, message=f"msg-{first}")
    assert known and released == [(other, "test.noop")]
    assert flight(store, call) == {other}
    assert [where for where, _ in store.gate_where(call, [first])] == ["d"]


def test_a_stream_of_owners_with_a_job_each_does_not_keep_a_flooding_owner_waiting(store: RedisStore) -> None:
    """A newcomer goes ahead of an owner alone in the ring, once: the next newcomer, arriving before that owner was
    served again, goes behind it."""
    call = gate_of(store, fallback=1)
    flood = [str(uuid.uuid4()) for _ in range(4)]
    assert store.gate_admit(call, flood[0], info(store), "0")[1] == [(flood[0], "test.noop")]
    for job_id in flood[1:]:
        assert store.gate_admit(call, job_id, info(store), "0")[1] == []
    running, order = flood[0], []
    for i in range(6):  # one owner with one job comes in, then the job in flight ends
        store.gate_admit(call, f"c{i}", gate_entry(store.keys.gate_owner(f"c{i}"), 5, "test.noop"), "0")
        (running, _), = store.gate_leave(call, [running], final=True)
        order.append(running)
    # Newcomers still go first (each after at most one job of the flood), in the order they came, and the flood
    # has its turns among them.
    assert order == ["c0", flood[1], "c1", "c2", flood[2], "c3"]


def test_a_retry_applied_twice_sends_its_job_once(store: RedisStore) -> None:
    """A retry's re-admission whose reply was lost is sent again by the client: the job, let in again after its
    run was claimed, must not leave flight a second time (its message would be pushed twice)."""
    call = gate_of(store, fallback=1)
    first, _ = submit(store, call)
    store.claim(first, ClaimTerms(5000, "w", 3))
    claimed = store.get(first).updated_ms  # type: ignore[union-attr]
    wait_until(lambda: store.gate_tick(gate_of(store))[0] > claimed, message="Redis's clock past the claim")

    def retry() -> tuple[bool, list[tuple[str, str]]]:
        return store.gate_admit(call, first, "", "0", leave_first=True, claimed_ms=claimed, message=f"again-{first}")

    assert retry() == (True, [(first, f"again-{first}")])
    assert retry() == (True, [])
    assert flight(store, call) == {first}
