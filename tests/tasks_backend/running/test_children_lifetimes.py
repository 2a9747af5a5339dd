"""How long child jobs live, and what a parent's wait is held by: a child expires with its parent (so a finished
child is not lost while its parent waits for a sibling, and a replayed spawn finds it), also with a parent whose life
was lengthened while it ran; a child whose parent is gone is cancelled when it is picked up; another owner's job that
`wait_for` reads as gone does not keep it waiting; and a child a rerun took over while it ran wakes that rerun.
No worker consumes the runtime's queue: each test runs the jobs itself, in the order it needs."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from tasks_backend.model.domain import JobState
from tasks_backend.running.context import CHILD_MIN_TTL_S, LeaseLost
from tasks_backend.service.runtime import Runtime, build_runtime
from tests.conftest import JOB_MODULES, make_settings, wait_until
from tests.support.child_jobs import MODULE


@pytest.fixture
def rt(redis_base: str) -> Runtime:
    return build_runtime(make_settings(redis_base, job_modules=(*JOB_MODULES, MODULE)))


def effects(ledger: Path) -> list[dict[str, Any]]:
    lines = [json.loads(x) for x in ledger.read_text().splitlines()] if ledger.exists() else []
    return [e for e in lines if e["event"] in ("effect", "child")]


def spawned(rt: Runtime, parent_id: str, n: int = 0) -> str:
    return str(json.loads(rt.store.recorded_step(parent_id, f"spawn:{n}") or "null"))


def test_another_owners_job_in_wait_for_does_not_hold_the_parent(rt: Runtime, tmp_path: Path) -> None:
    store, executor = rt.store, rt.executor()
    bobs, _ = rt.service.submit("bob", "test.child", {"ledger": str(tmp_path / "bob"), "index": 0})  # stays queued
    parent, _ = rt.service.submit("alice", "kidtests.waiter", {"kids": [
        {"op": "test.child", "params": {"ledger": str(tmp_path / "ledger"), "index": 0}}], "others": [bobs.id]})
    assert executor.run(parent.id) == "suspended"
    kid = spawned(rt, parent.id)
    assert store.waiting_of(parent.id).children == [kid]  # type: ignore[union-attr]
    assert executor.run(kid) == "completed"
    # The last of its own children woke it, though bob's job has not ended: to alice that job is gone.
    assert store.get(parent.id).state is JobState.QUEUED  # type: ignore[union-attr]
    assert executor.run(parent.id) == "completed"
    assert store.get(parent.id).result == {"children": [kid], "failed": bobs.id, "state": "missing"}  # type: ignore[union-attr]
    assert store.get(bobs.id).state is JobState.QUEUED  # type: ignore[union-attr]


def test_a_finished_child_outlives_its_own_ttl_while_the_parent_waits_for_a_sibling(
        rt: Runtime, tmp_path: Path) -> None:
    store, executor = rt.store, rt.executor()
    ledger = str(tmp_path / "ledger")
    parent, _ = rt.service.submit("alice", "kidtests.waiter", {"kids": [
        {"op": "kidtests.short_child", "params": {"ledger": ledger, "index": 0}},  # its operation's TTL: 2 s
        {"op": "test.child", "params": {"ledger": ledger, "index": 1}}]})
    assert executor.run(parent.id) == "suspended"
    short, slow = spawned(rt, parent.id, 0), spawned(rt, parent.id, 1)
    made = store.get(short)
    assert made is not None and abs(made.expires_ms - parent.expires_ms) < 1000
    assert executor.run(short) == "completed"
    wait_until(lambda: store.now_ms() > made.created_ms + 2500, 10, message="the short child's own TTL to pass")
    assert store.get(short) is not None
    assert executor.run(slow) == "completed"
    assert executor.run(parent.id) == "completed"
    assert store.get(parent.id).result["results"] == [{"child": 0}, {"child": 1}]  # type: ignore[union-attr]


def test_a_spawn_replayed_after_the_childs_own_ttl_gets_the_same_child(rt: Runtime, tmp_path: Path) -> None:
    store, executor = rt.store, rt.executor()
    ledger = tmp_path / "ledger"
    parent, _ = rt.service.submit("alice", "kidtests.waiter", {"kids": [
        {"op": "kidtests.short_child", "params": {"ledger": str(ledger)}}]})
    spawn, made = executor.spawner, []
    assert spawn is not None

    def spawn_then_die(*args: Any) -> str:
        made.append(spawn(*args))
        assert executor.run(made[-1]) == "completed"  # another worker runs the child at once
        raise LeaseLost()  # stands for the parent's worker killed before the spawn is recorded

    executor.spawner = spawn_then_die
    assert executor.run(parent.id) == "lost"
    executor.spawner = spawn
    created = store.get(made[0]).created_ms  # type: ignore[union-attr]
    wait_until(lambda: store.now_ms() > max(created + 2500, store.get(parent.id).lease_until_ms),  # type: ignore[union-attr]
               10, message="the parent's lease and the child's own TTL to pass")
    outcome = executor.run(parent.id)
    if outcome == "suspended":  # it waits for a second child, made as the first was gone: run it as a worker would
        assert executor.run(spawned(rt, parent.id)) == "completed"
    assert len(effects(ledger)) == 1, effects(ledger)
    assert (outcome, store.get(parent.id).result["children"]) == ("completed", made)  # type: ignore[union-attr]


def test_a_child_expires_with_its_parent(rt: Runtime, tmp_path: Path) -> None:
    store, executor = rt.store, rt.executor()
    parent, _ = rt.service.submit("alice", "kidtests.waiter", {"kids": [
        {"op": "test.child", "params": {"ledger": str(tmp_path / "ledger"), "index": 0}}]}, ttl_s=3)
    assert executor.run(parent.id) == "suspended"
    kid = spawned(rt, parent.id)
    wait_until(lambda: store.get(parent.id) is None, 10, message="the parent to expire")
    wait_until(lambda: store.get(kid) is None, 2, message="the child to expire with it")


def test_a_child_gets_the_least_ttl_when_its_parent_has_less_left(rt: Runtime, tmp_path: Path) -> None:
    store, executor = rt.store, rt.executor()
    parent, _ = rt.service.submit("alice", "kidtests.waiter", {"kids": [
        {"op": "test.child", "params": {"ledger": str(tmp_path / "ledger"), "index": 0}}]}, ttl_s=1.5)
    wait_until(lambda: store.now_ms() > parent.created_ms + 800, 5, message="the parent to have under 1 s left")
    assert executor.run(parent.id) == "suspended"
    assert store.get(spawned(rt, parent.id)).ttl_ms == int(1000 * CHILD_MIN_TTL_S)  # type: ignore[union-attr]


def test_a_child_whose_parent_expired_is_cancelled_when_picked_up(rt: Runtime, tmp_path: Path) -> None:
    store, executor = rt.store, rt.executor()
    ledger = tmp_path / "ledger"
    parent, _ = rt.service.submit("alice", "test.noop", {}, ttl_s=1)
    # Made by the runtime's submit with the operation's own TTL: it outlives the parent.
    kid = rt.spawn("alice", "test.child", {"ledger": str(ledger), "index": 0}, "spawn-key", parent.id)
    wait_until(lambda: store.get(parent.id) is None, 10, message="the parent to expire")
    assert executor.run(kid) == "cancelled"
    assert store.get(kid).state is JobState.CANCELLED and not effects(ledger)  # type: ignore[union-attr]


def _run_in_thread(executor: Any, job_id: str) -> tuple[threading.Thread, list[str]]:
    outcome: list[str] = []
    thread = threading.Thread(target=lambda: outcome.append(executor.run(job_id)), daemon=True)
    thread.start()
    return thread, outcome


def test_a_child_spawned_after_its_parent_was_given_longer_to_live_lives_as_long(rt: Runtime, tmp_path: Path) -> None:
    store, executor = rt.store, rt.executor()
    hold = tmp_path / "hold"
    parent, _ = rt.service.submit("alice", "test.parent", {"ledger": str(tmp_path / "ledger"), "children": 1,
                                                           "hold": str(hold)})
    thread, outcome = _run_in_thread(executor, parent.id)
    wait_until(lambda: store.get(parent.id).state is JobState.RUNNING, 10,  # type: ignore[union-attr]
               message="the parent to run")
    # As a rerun that takes the running job over as its child does (`service.rerun`): its run read its end before.
    until = store.now_ms() + 3_000_000
    store.adopt(parent.id, until)
    hold.touch()
    thread.join(10)
    assert outcome == ["suspended"]
    kid = store.get(spawned(rt, parent.id))
    assert kid is not None and kid.expires_ms >= until - 5_000, (kid.expires_ms, until)


def test_a_child_a_rerun_took_over_while_it_ran_wakes_the_rerun_when_it_ends(rt: Runtime, tmp_path: Path) -> None:
    store, executor = rt.store, rt.executor()
    gate, mend = tmp_path / "gate", tmp_path / "mend"
    original, _ = rt.service.submit("alice", "test.parent", {
        "ledger": str(tmp_path / "ledger"), "children": 1, "gate": str(gate), "quit": True, "mend": str(mend)})
    assert executor.run(original.id) == "failed"  # it quit right after its spawn
    kid = spawned(rt, original.id)
    thread, outcome = _run_in_thread(executor, kid)  # the child's run begins while the original is its parent
    wait_until(lambda: store.get(kid).state is JobState.RUNNING, 10, message="the child to run")  # type: ignore[union-attr]
    mend.touch()
    rerun, _ = rt.service.rerun("alice", original.id, keep_steps=True)
    assert store.get(kid).parent_id == rerun.id  # type: ignore[union-attr]
    assert executor.run(rerun.id) == "suspended"  # waiting for the child it kept
    gate.touch()
    thread.join(10)
    assert outcome == ["completed"]
    # Woken by the child's end at once (no wake schedule runs here), not left to the schedule's next look.
    assert store.get(rerun.id).state is JobState.QUEUED  # type: ignore[union-attr]
    assert executor.run(rerun.id) == "completed"
    assert store.get(rerun.id).result == {"children": [kid], "results": [{"child": 0}]}  # type: ignore[union-attr]


def test_a_child_spawned_while_its_parent_is_given_longer_to_live_lives_as_long(
        rt: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, executor = rt.store, rt.executor()
    hold = tmp_path / "hold"
    parent, _ = rt.service.submit("alice", "test.parent", {"ledger": str(tmp_path / "ledger"), "children": 1,
                                                           "hold": str(hold)})
    time_left, until = store.time_left_ms, store.now_ms() + 3_000_000

    def lengthened_right_after(job_id: str) -> int | None:
        left = time_left(job_id)
        # A rerun taking the job over lengthens it now (`_keep_alive` reads its children before this one exists).
        store.adopt(job_id, until)
        return left

    monkeypatch.setattr(store, "time_left_ms", lengthened_right_after)
    hold.touch()
    assert executor.run(parent.id) == "suspended"
    kid = store.get(spawned(rt, parent.id))
    assert kid is not None and kid.expires_ms >= until - 5_000, (kid.expires_ms, until)
    assert store.redis.pttl(store.keys.job(kid.id)) >= until - store.now_ms() - 5_000
