"""A lone owner's bypass of the dispatch gate (`scripts/lib/gate_pump.lua`'s `gate_admit`, `lib/gate_bypass.lua`)
against a real Redis that is also the broker: its jobs past the slots go straight to the bypass list
(the queue's priority-9 list, read by workers after the queue's own), and once another job needs the gate the owner
takes turns from that list as if its jobs had been held."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tasks_backend.devtools.embedded import EmbeddedRedis
from tasks_backend.model.domain import JobState
from tasks_backend.running.admission import DispatchGate
from tasks_backend.running.dispatch import RedisDispatcher
from tasks_backend.service.runtime import Runtime
from tasks_backend.store.admission import entry as gate_entry
from tasks_backend.store.claims import ClaimTerms
from tests.conftest import wait_until
from tests.support.gate import SLOTS, bypass, call, counts, drain, ids, look_at, made, queued, run, submit, take, where


@pytest.fixture
def runtime(redis_base: str) -> Iterator[Runtime]:
    yield from made(redis_base)


@pytest.fixture
def swept(redis_base: str) -> Iterator[Runtime]:
    """The same, with a grace of 50 ms: the sweeper looks at a queued job soon after it was made or sent."""
    yield from made(redis_base, queued_grace_s=0.05)


def test_the_bypass_list_is_the_one_workers_read_after_the_queues_own(runtime: Runtime) -> None:
    assert isinstance(runtime.dispatcher, RedisDispatcher)
    with runtime.dispatcher.app.connection_for_read() as conn:
        channel = conn.default_channel
        assert channel._q_for_pri(runtime.settings.queue, 9) == bypass(runtime)
        assert channel.priority_steps[0] == 0 and channel.priority_steps[-1] == 9


def test_a_lone_owners_jobs_past_the_slots_skip_the_gate_and_their_ends_cost_it_nothing(runtime: Runtime) -> None:
    jobs = [submit(runtime, "alice") for _ in range(10)]
    assert ids(runtime, runtime.settings.queue) == jobs[:SLOTS] and ids(runtime, bypass(runtime)) == jobs[SLOTS:]
    assert where(runtime, jobs) == ["f"] * SLOTS + ["b"] * (10 - SLOTS)
    gate = call(runtime)
    assert runtime.store.redis.zcard(gate.key("ready")) == 0
    # A bypassed job's end makes no room in flight (it was never counted there) and is forgotten.
    run(runtime, jobs[2])
    assert where(runtime, [jobs[2]]) == [None] and queued(runtime) == jobs[:2] + jobs[3:]
    assert runtime.store.redis.zcard(gate.key("flight")) == SLOTS
    assert drain(runtime) == jobs[:2] + jobs[3:]
    assert counts(runtime) == ((2, 0), (8, 0))


def test_a_lone_owners_new_job_follows_its_bypass_list_even_when_a_slot_is_free(runtime: Runtime) -> None:
    jobs = [submit(runtime, "alice") for _ in range(6)]
    run(runtime, jobs[0])  # a slot in flight is free, while her bypassed jobs still wait
    later = submit(runtime, "alice")
    assert where(runtime, [later]) == ["b"]
    assert drain(runtime) == [*jobs[1:], later]


def test_the_sweeper_does_not_take_a_bypassed_job_for_lost_while_the_other_list_moves(swept: Runtime) -> None:
    """The two lists together are not first in, first out: counted against both, a job deep in the bypass list
    looked lost once as many messages had left the queue's own list as were pushed when it was first looked at."""
    rt = swept
    alice = [submit(rt, "alice") for _ in range(8)]
    watched = alice[-1]

    def look() -> dict[str, int]:
        return look_at(rt, watched)

    wait_until(lambda: look() and rt.store.redis.hget(rt.store.keys.job(watched), "bmark"),
               message="the sweeper's first look at the bypassed job, past its grace")
    bob = [submit(rt, "bob") for _ in range(3)]
    for job_id in [alice[0], alice[1], bob[0], alice[2], bob[1], alice[3], bob[2], alice[4]]:
        assert queued(rt)[0] == job_id
        run(rt, job_id)
    looks: list[dict[str, int]] = []
    for _ in range(4):  # past the grace, twice over
        wait_until(lambda: looks.append(look()) or looks[-1] != {}, message="a look")
    assert not any(seen.get("republish") for seen in looks), looks
    assert ids(rt, rt.settings.queue) == alice[5:7] and ids(rt, bypass(rt)) == [watched]


def test_the_sweeper_republishes_a_bypassed_job_whose_message_was_lost(swept: Runtime) -> None:
    rt = swept
    alice = [submit(rt, "alice") for _ in range(4)]
    lost = alice[3]
    rt.store.redis.lpop(bypass(rt))  # its message, lost in a worker's fetch window

    def look() -> dict[str, int]:
        return look_at(rt, lost)

    wait_until(lambda: look().get("later"), message="the sweeper's first look")
    assert lost not in queued(rt)
    run(rt, alice[2])  # the one ahead of it left the bypass list: so did its own, which no worker claimed
    wait_until(lambda: look().get("republish"), message="the lost message republished")
    # Through the gate, where its new message is counted: both slots are taken, so it is held until one is free.
    assert where(rt, [lost]) == ["h"] and lost not in queued(rt)
    run(rt, alice[0])
    assert queued(rt) == [alice[1], lost]


def test_a_bypassed_job_whose_worker_was_lost_comes_back_through_the_gate(swept: Runtime) -> None:
    rt = swept
    alice = [submit(rt, "alice") for _ in range(4)]
    running = alice[2]
    take(rt, running)
    rt.store.claim(running, ClaimTerms(50, "lost-worker", 3))  # its worker dies: the lease runs out

    def look() -> dict[str, int]:
        return look_at(rt, running)

    wait_until(lambda: look().get("republish"), message="the lost run requeued")
    assert where(rt, [running]) == ["h"]  # counted by the gate now, not left as sent past it
    run(rt, alice[0])
    assert ids(rt, rt.settings.queue) == [alice[1], running]


def test_a_job_marked_in_the_bypass_list_is_looked_at_afresh_in_the_queues_own(swept: Runtime) -> None:
    """Its marks in the two lists are apart: a mark of the bypass list's count, read against the queue's own list,
    would take a job still waiting there for lost."""
    rt = swept
    alice = [submit(rt, "alice") for _ in range(4)]
    watched = alice[3]

    def look() -> dict[str, int]:
        return look_at(rt, watched)

    wait_until(lambda: look() and rt.store.redis.hget(rt.store.keys.job(watched), "bmark"),
               message="the sweeper's first look at the bypassed job, past its grace")
    bob = submit(rt, "bob")
    for job_id in (alice[0], alice[1], bob):
        run(rt, job_id)
    assert where(rt, [watched]) == ["f"] and ids(rt, rt.settings.queue) == [alice[2], watched]
    looks: list[dict[str, int]] = []
    for _ in range(4):  # past the flight's grace, twice over
        wait_until(lambda: looks.append(look()) or looks[-1] != {}, message="a look")
    assert not any(seen.get("republish") for seen in looks), looks
    assert ids(rt, rt.settings.queue) == [alice[2], watched]


def test_another_owners_job_goes_ahead_of_the_bypass_list_and_they_take_turns(runtime: Runtime) -> None:
    alice = [submit(runtime, "alice") for _ in range(10)]
    bob = [submit(runtime, "bob") for _ in range(3)]
    more = submit(runtime, "alice")  # the bypass is over: held, behind the jobs in the list
    assert where(runtime, [*bob, more]) == ["h"] * 4
    assert queued(runtime) == alice
    run(runtime, alice[0])
    assert ids(runtime, runtime.settings.queue) == [alice[1], bob[0]]  # the newcomer first
    # Then turn by turn: each of alice's from her bypass list (moved to the queue's own list, into flight).
    assert drain(runtime) == [alice[1], bob[0], alice[2], bob[1], alice[3], bob[2], *alice[4:], more]
    assert counts(runtime) == ((2 + 3 + 8 + 1, 0), (8, 0))


def test_once_its_list_is_empty_another_owner_alone_skips_the_gate_in_turn(runtime: Runtime) -> None:
    alice = [submit(runtime, "alice") for _ in range(4)]
    for job_id in alice[SLOTS:]:  # her bypass list runs dry; her first two still take the slots
        run(runtime, job_id)
    bob = [submit(runtime, "bob", priority=3) for _ in range(3)]
    assert where(runtime, bob) == ["b"] * 3
    assert drain(runtime) == alice[:SLOTS] + bob


def test_a_higher_priority_of_the_same_owner_goes_ahead_of_its_bypass_list(runtime: Runtime) -> None:
    low = [submit(runtime, "alice", priority=1) for _ in range(8)]
    urgent = submit(runtime, "alice", priority=9)
    assert where(runtime, [urgent]) == ["h"]
    run(runtime, low[0])
    assert ids(runtime, runtime.settings.queue) == [low[1], urgent]
    assert drain(runtime) == [low[1], urgent, *low[SLOTS:]]


def test_the_bypass_list_goes_ahead_of_a_later_job_when_an_earlier_one_waits_on_a_full_value(
        runtime: Runtime) -> None:
    """The owner's turn compares the bypass list with the held job that may go now, not with the first held one:
    a job that waited and came back, on a value now full, does not let a later job pass the list."""
    gate, store = call(runtime), runtime.store
    message = DispatchGate(store, runtime.dispatcher, runtime.settings).message

    def admit(owner: str, job_id: str, value: str = "") -> None:
        conc = (store.keys.gate_concurrency("test.noop", value), 1) if value else ("", 0)
        store.gate_admit(gate, job_id, gate_entry(store.keys.gate_owner(owner), 5, message(job_id, "test.noop"),
                                                  *conc), "0")

    first = ["p0", "p1"]
    for job_id in first:
        admit("alice", job_id)
    admit("alice", "y", "v")  # the slots are taken: held, and given its place
    run(runtime, "p0")  # let in: its value is full now
    take(runtime, "y")
    store.gate_leave(gate, ["y"], final=False)  # it parks, and will come back to its place
    admit("alice", "p2")  # a slot is free: sent
    flood = ["a0", "a1", "a2"]
    for job_id in flood:
        admit("alice", job_id)
    assert where(runtime, flood) == ["b"] * 3
    admit("carol", "c", "v")
    run(runtime, "p1")  # carol's, on the value, takes the room
    assert ids(runtime, runtime.settings.queue) == ["p2", "c"]
    store.gate_admit(gate, "y", "", "0", message=message("y", "test.noop"))  # back: its value is full, held
    admit("alice", "later")
    run(runtime, "p2")
    # The room goes to alice's oldest in her bypass list, not to the job after it.
    assert ids(runtime, runtime.settings.queue) == ["c", "a0"]


def test_a_delayed_job_now_due_ends_the_bypass(runtime: Runtime) -> None:
    alice = [submit(runtime, "alice") for _ in range(6)]
    bob = submit(runtime, "bob", delay_ms=1)
    assert where(runtime, [bob]) == ["d"]
    wait_until(lambda: runtime.store.gate_tick(call(runtime)) and where(runtime, [bob]) == ["h"],
               message="the delayed job was held")
    run(runtime, alice[0])
    assert ids(runtime, runtime.settings.queue) == [alice[1], bob]
    assert drain(runtime) == [alice[1], bob, *alice[SLOTS:]]


def test_a_bypassed_job_that_parks_is_admitted_again_by_the_rules(runtime: Runtime) -> None:
    alice = [submit(runtime, "alice") for _ in range(4)]
    parked = alice[2]
    runtime.store.redis.rpop(bypass(runtime))  # a worker took it, and its run parks
    runtime.store.gate_leave(call(runtime), [parked], final=False)
    assert where(runtime, [parked]) == ["x"]
    DispatchGate(runtime.store, runtime.dispatcher, runtime.settings).resume(parked, "test.noop")
    assert where(runtime, [parked]) == ["h"]  # the slots are taken: held, not sent past the gate again
    assert queued(runtime) == [alice[0], alice[1], alice[3]]
    # Its place among alice's is the one it was given when sent past the gate: ahead of those after it.
    assert drain(runtime) == [alice[0], alice[1], parked, alice[3]]


def test_the_sweeper_forgets_a_bypassed_job_whose_runs_end_was_lost(runtime: Runtime) -> None:
    alice = [submit(runtime, "alice") for _ in range(4)]
    lost = alice[3]
    runtime.store.redis.hset(runtime.store.keys.job(lost), "state", JobState.COMPLETED.value)
    gate = DispatchGate(runtime.store, runtime.dispatcher, runtime.settings)
    wait_until(lambda: gate.prune() >= 0 and where(runtime, [lost]) == [None], message="the entry was pruned")
    assert where(runtime, alice[:3]) == ["f", "f", "b"]


def test_a_bypassed_submit_reads_the_gates_turns_once_and_no_entry(tmp_path: Path) -> None:
    """A job the submit script has just made is not known to the gate yet: its entry is not read, and the slots and
    the bypass come from one read of the gate's `turns`; while the bypass goes on, its jobs in flight are not
    counted. On a Redis of its own: nothing else is counted."""
    server = EmbeddedRedis(appendonly=False, data_dir=str(tmp_path)).start()
    try:
        rt = next(made(f"redis://127.0.0.1:{server.port}"))
        first = [submit(rt, "alice") for _ in range(SLOTS + 1)]
        assert where(rt, first) == ["f"] * SLOTS + ["b"]
        rt.store.redis.config_resetstat()
        job = submit(rt, "alice")
        stats = rt.store.redis.info("commandstats")
        calls = {name.removeprefix("cmdstat_"): value["calls"] for name, value in stats.items()}
        assert calls["evalsha"] == 1
        assert calls.get("hget", 0) == 0 and calls["hmget"] == 2  # the job's own record, and `turns`
        assert calls["zcard"] == 1  # nobody waits in the ring; what is in flight does not decide
        assert where(rt, [job]) == ["b"] and queued(rt) == [*first, job]
    finally:
        server.stop()


def test_about_one_submit_in_eight_trims_the_owners_index_chosen_by_the_job_id(runtime: Runtime) -> None:
    index = runtime.store.keys.owner_index("alice")
    trimmed, kept = [], []
    while len(trimmed) < 2 or len(kept) < 2:
        runtime.store.redis.zadd(index, {"long-gone": 0})  # older than any job's retention
        job = submit(runtime, "alice")
        (kept if runtime.store.redis.zscore(index, "long-gone") is not None else trimmed).append(job)
        assert len(trimmed) + len(kept) < 400, "no submit trimmed the index"
    assert all(ord(job[-1]) % 8 == 0 for job in trimmed) and not any(ord(job[-1]) % 8 == 0 for job in kept)
    assert runtime.store.redis.zscore(index, kept[-1]) is not None and runtime.store.redis.pttl(index) > 0


def test_a_submit_applied_twice_sends_its_job_once_whether_in_flight_or_bypassed(runtime: Runtime) -> None:
    """The script of a submit whose reply was lost is sent again whole: the second call finds the job made by the
    first (not by itself), so it reads the gate's entry and leaves the job where the first call sent it."""
    scripts = runtime.store.scripts
    sent: list[tuple[list[str], tuple[Any, ...]]] = []
    call_script = scripts.call

    def recording(name: str, keys: list[str], *args: Any) -> Any:
        if name == "submit":
            sent.append((list(keys), args))
        return call_script(name, keys, *args)

    scripts.call = recording  # type: ignore[method-assign]
    jobs = [submit(runtime, "alice") for _ in range(SLOTS + 1)]
    scripts.call = call_script  # type: ignore[method-assign]
    assert where(runtime, jobs) == ["f"] * SLOTS + ["b"]
    for keys, args in (sent[0], sent[-1]):  # one sent into flight, one past the slots
        call_script("submit", keys, *args)
    assert where(runtime, jobs) == ["f"] * SLOTS + ["b"] and queued(runtime) == jobs
