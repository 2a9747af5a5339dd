"""A rerun keeping the steps of a parent that failed on a child: over a real worker and real HTTP, the failed child
is made again, the completed ones are kept (not run again, the rerun's now, alive as long as it); a retried rerun
that finds the rerun cancelled cancels a kept child with its own children; and which records `kept_children` drops,
as pure logic."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tasks_backend.errors import StoreUnavailable
from tasks_backend.model.domain import JobRecord, JobState, SubmitOutcome
from tasks_backend.service.rerun import kept_children
from tasks_backend.service.runtime import Runtime, build_runtime
from tasks_backend.store.outcomes import Cancelled
from tests.conftest import ALICE, JOB_MODULES, make_settings, wait_until
from tests.support.child_jobs import MODULE as CHILD_JOBS


def _ledger(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _settled(http: httpx.Client, job_id: str, status: str) -> dict[str, Any]:
    return wait_until(lambda: (j := http.get(f"/v1/jobs/{job_id}", headers=ALICE).json())["status"] == status and j,
                      20, message=f"{job_id} to be {status}")


def _ends_ms(handle: dict[str, Any]) -> int:
    created = dt.datetime.fromisoformat(handle["createdAt"].replace("Z", "+00:00"))
    return int(created.timestamp() * 1000) + int(handle["ttlMs"])


@pytest.mark.usefixtures("worker")
def test_a_rerun_keeping_steps_makes_the_failed_child_again_and_keeps_the_others(
        http: httpx.Client, runtime: Runtime, tmp_path: Path) -> None:
    ledger, mend = tmp_path / "ledger", tmp_path / "mend"
    submitted = http.post("/v1/jobs", headers=ALICE, json={
        "operation": "test.parent", "params": {"ledger": str(ledger), "children": 3, "fail": 1, "mend": str(mend)}})
    assert submitted.status_code == 202, submitted.text
    original = submitted.json()["taskId"]
    failed = _settled(http, original, "failed")
    assert failed["error"]["type"] == "ChildFailed"
    first = {e["index"]: e["id"] for e in _ledger(ledger) if e["event"] == "child"}
    assert sorted(first) == [0, 1, 2]

    mend.touch()
    answer = http.post(f"/v1/jobs/{original}/rerun", json={"keepSteps": True}, headers=ALICE)
    assert answer.status_code in (201, 202), answer.text
    rerun = answer.json()["taskId"]
    done = _settled(http, rerun, "completed")
    assert done["result"]["results"] == [{"child": 0}, {"child": 1}, {"child": 2}]
    kids = done["result"]["children"]
    # The completed children are the original's, not run again; the failed one is a new job that ran once.
    assert (kids[0], kids[2]) == (first[0], first[2]) and kids[1] != first[1]
    effects = [(e["index"], e["id"]) for e in _ledger(ledger) if e["event"] == "child"]
    assert sorted(effects) == sorted([(0, first[0]), (1, first[1]), (1, kids[1]), (2, first[2])])
    # The kept children are the rerun's now (a cancel of it would reach them); the original keeps the failed one.
    listed = http.get("/v1/jobs", params={"parent": rerun}, headers=ALICE).json()["jobs"]
    assert sorted(k["taskId"] for k in listed) == sorted(kids)
    listed = http.get("/v1/jobs", params={"parent": original}, headers=ALICE).json()["jobs"]
    assert [k["taskId"] for k in listed] == [first[1]]
    # A kept child lives as long as the rerun (it was made to end with the original); its feed, cut short when it
    # finished, stays so.
    ends = _ends_ms(done)
    now = runtime.store.now_ms()
    for kept in (kids[0], kids[2]):
        handle = http.get(f"/v1/jobs/{kept}", headers=ALICE).json()
        assert _ends_ms(handle) >= ends and handle["parentId"] == rerun
        assert runtime.store.redis.pttl(runtime.store.keys.job(kept)) >= ends - now - 1000
        assert 0 < runtime.store.redis.pttl(runtime.store.keys.events(kept)) <= 60_000

    # The same original rerun once more: the children the first rerun took over stay its, read but not taken.
    again = http.post(f"/v1/jobs/{original}/rerun", json={"keepSteps": True}, headers=ALICE).json()["taskId"]
    second = _settled(http, again, "completed")["result"]
    assert (second["children"][0], second["children"][2]) == (first[0], first[2])
    assert http.get(f"/v1/jobs/{first[0]}", headers=ALICE).json()["parentId"] == rerun
    listed = http.get("/v1/jobs", params={"parent": again}, headers=ALICE).json()["jobs"]
    assert [k["taskId"] for k in listed] == [second["children"][1]]


@pytest.fixture
def rt(redis_base: str) -> Runtime:
    """A runtime of its own whose queue no worker reads: the tests below run each job themselves, in the order the
    case needs."""
    return build_runtime(make_settings(redis_base, job_modules=(*JOB_MODULES, CHILD_JOBS)))


def _spawned(rt: Runtime, parent_id: str) -> str:
    return str(json.loads(rt.store.recorded_step(parent_id, "spawn:0") or "null"))


def test_a_rerun_of_a_parent_whose_cancel_has_not_reached_its_children_yet_makes_them_again(
        rt: Runtime, tmp_path: Path) -> None:
    store, executor = rt.store, rt.executor()
    original, _ = rt.service.submit("alice", "test.parent", {"ledger": str(tmp_path / "ledger"), "children": 1})
    assert executor.run(original.id) == "suspended"  # it waits for its child, which no one runs yet
    kid = _spawned(rt, original.id)
    # The cancel's first step alone: its request is still on its way to the children (or died on it).
    assert store.request_cancel(original.id, "alice") is Cancelled.CANCELLED
    rerun, _ = rt.service.rerun("alice", original.id, keep_steps=True)
    # The cascade is finished first: the child is not kept, only for that cancel to reach it under the rerun.
    assert store.get(kid).state is JobState.CANCELLED  # type: ignore[union-attr]
    assert executor.run(rerun.id) == "suspended"
    again = _spawned(rt, rerun.id)
    assert again != kid and executor.run(again) == "completed"
    assert executor.run(rerun.id) == "completed"


def test_a_rerun_that_waits_for_a_kept_child_that_ended_before_the_takeover_is_woken(
        rt: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, executor = rt.store, rt.executor()
    mend = tmp_path / "mend"
    original, _ = rt.service.submit("alice", "test.parent", {"ledger": str(tmp_path / "ledger"), "children": 1,
                                                             "quit": True, "mend": str(mend)})
    assert executor.run(original.id) == "failed"  # it quit right after its spawn; the child was not run yet
    kid = _spawned(rt, original.id)
    mend.touch()
    adopt = store.adopt

    def others_run_first(child_id: str, until_ms: int, *, taken_from: str = "", taker: str = "") -> Any:
        if taker:  # other workers, between the rerun's submit and its takeover: the rerun parks, the child ends
            assert executor.run(taker) == "suspended"
            assert executor.run(child_id) == "completed"  # and tells its parent then: still the original
        return adopt(child_id, until_ms, taken_from=taken_from, taker=taker)

    monkeypatch.setattr(store, "adopt", others_run_first)
    rerun, _ = rt.service.rerun("alice", original.id, keep_steps=True)
    monkeypatch.undo()
    assert store.get(rerun.id).state is JobState.QUEUED  # type: ignore[union-attr]  # woken once the child was its
    assert executor.run(rerun.id) == "completed"
    assert store.get(rerun.id).result == {"children": [kid], "results": [{"child": 0}]}  # type: ignore[union-attr]


def _dies_before_the_takeover(store: Any) -> Any:
    adopt = store.adopt

    def adopt_or_die(child_id: str, until_ms: int, *, taken_from: str = "", taker: str = "") -> Any:
        if taker:  # stands for the request's process killed between making the rerun and taking the child over
            raise StoreUnavailable()
        return adopt(child_id, until_ms, taken_from=taken_from, taker=taker)

    return adopt_or_die


def test_a_retried_rerun_takes_over_the_children_its_first_request_kept_though_one_ended_since(
        rt: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, executor = rt.store, rt.executor()
    ledger = str(tmp_path / "ledger")
    original, _ = rt.service.submit("alice", "kidtests.waiter", {"kids": [
        {"op": "test.child", "params": {"ledger": ledger, "index": 0, "fail": True}},
        {"op": "test.child", "params": {"ledger": ledger, "index": 1, "fail": True}}],
        "wait_first": 1, "raise_failed": True})
    assert executor.run(original.id) == "suspended"  # it waits for its first child only
    first = _spawned(rt, original.id)
    second = str(json.loads(store.recorded_step(original.id, "spawn:1") or "null"))
    assert executor.run(first) == "failed"
    assert executor.run(original.id) == "failed"  # on that child, while the second has not run yet
    monkeypatch.setattr(store, "adopt", _dies_before_the_takeover(store))
    with pytest.raises(StoreUnavailable):
        rt.service.rerun("alice", original.id, keep_steps=True, idempotency_key="once")
    monkeypatch.undo()
    assert executor.run(second) == "failed"  # it ends (failed) between the request and its retry

    # The retry finds the rerun made, whose steps replay the second child's spawn: that child becomes its.
    rerun, outcome = rt.service.rerun("alice", original.id, keep_steps=True, idempotency_key="once")
    assert outcome is SubmitOutcome.EXISTING
    assert store.get(second).parent_id == rerun.id  # type: ignore[union-attr]
    assert store.child_ids(rerun.id) == [second]


def test_a_retried_rerun_that_finds_the_rerun_cancelled_cancels_a_kept_child_with_its_children(
        rt: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, executor = rt.store, rt.executor()
    mend = tmp_path / "mend"
    original, _ = rt.service.submit("alice", "kidtests.waiter", {"kids": [{"op": "test.parent", "params": {
        "ledger": str(tmp_path / "ledger"), "children": 1}}], "quit_unless": str(mend)})
    assert executor.run(original.id) == "failed"  # it quit right after spawning its child
    kid = _spawned(rt, original.id)
    assert executor.run(kid) == "suspended"  # the kept child waits for a child of its own, which no one runs
    grandchild = _spawned(rt, kid)
    mend.touch()
    monkeypatch.setattr(store, "adopt", _dies_before_the_takeover(store))
    with pytest.raises(StoreUnavailable):
        rt.service.rerun("alice", original.id, keep_steps=True, idempotency_key="once")
    monkeypatch.undo()
    rerun = (store.idempotency_value("alice", "once") or "").split()[0]
    assert rt.service.cancel("alice", rerun).state is JobState.CANCELLED  # it had no children yet: none cancelled
    assert store.get(kid).state is JobState.SUSPENDED  # type: ignore[union-attr]

    # The request made again: the kept child goes to the cancelled rerun and is cancelled with its own child.
    again, outcome = rt.service.rerun("alice", original.id, keep_steps=True, idempotency_key="once")
    assert (again.id, outcome) == (rerun, SubmitOutcome.EXISTING)
    assert store.get(kid).state is JobState.CANCELLED  # type: ignore[union-attr]
    assert store.get(grandchild).state is JobState.CANCELLED  # type: ignore[union-attr]


def _record(job_id: str, state: JobState, error: dict[str, Any] | None = None, parent: str | None = None) -> JobRecord:
    return JobRecord(id=job_id, owner="alice", operation="op", state=state, created_ms=0, updated_ms=0, ttl_ms=1,
                     poll_ms=1, error=error, parent_id=parent)


def _failed_on(child: str, state: str = "failed") -> dict[str, str]:
    return {"wait:0": json.dumps({"failed": {"child_id": child, "state": state, "error": None}})}


ORIGINAL = _record("p", JobState.FAILED, {"type": "ChildFailed", "message": "Child job c1 failed"})
CHILDREN = {"spawn:0": _record("c0", JobState.COMPLETED, parent="p"), "spawn:1": _record("c1", JobState.FAILED,
                                                                                         parent="p")}
SPAWNS = {"spawn:0": '"c0"', "spawn:1": '"c1"'}


def test_the_failed_wait_and_the_failed_childs_spawn_are_dropped() -> None:
    steps = {**SPAWNS, **_failed_on("c1"), "mine": "1"}
    kept, children = kept_children(ORIGINAL, steps, CHILDREN, "wait:0")
    assert kept == {"spawn:0": '"c0"', "mine": "1"} and children == ["c0"]


@pytest.mark.parametrize("case", ["steps after the wait", "no last step", "not ChildFailed", "another message",
                                  "two failed waits", "child missing", "cancelled original"])
def test_a_failure_that_cannot_be_told_apart_keeps_every_step(case: str) -> None:
    original, steps, children, last = ORIGINAL, {**SPAWNS, **_failed_on("c1")}, dict(CHILDREN), "wait:0"
    if case == "steps after the wait":  # caught, a clean-up child made and waited for, then raised again
        steps |= {"spawn:2": '"c2"', "wait:1": json.dumps({"results": [None]})}
        children["spawn:2"], last = _record("c2", JobState.COMPLETED, parent="p"), "wait:1"
    elif case == "no last step":  # recorded before the job said which was last
        last = None
    elif case == "not ChildFailed":
        original = _record("p", JobState.FAILED, {"type": "ValueError", "message": "Child job c1 failed"})
    elif case == "another message":
        original = _record("p", JobState.FAILED, {"type": "ChildFailed", "message": "Child job c0 failed"})
    elif case == "two failed waits":  # user code caught the first and waited again: a path the rerun must repeat
        steps["wait:1"] = steps["wait:0"]
    elif case == "child missing":  # the wait saw it gone: whether it ran is not known
        steps = {**SPAWNS, **_failed_on("c9", "missing")}
        original = _record("p", JobState.FAILED, {"type": "ChildFailed", "message": "Child job c9 missing"})
    else:
        original = _record("p", JobState.CANCELLED, ORIGINAL.error)
    kept, kids = kept_children(original, steps, children, last)
    assert kept == steps and kids == [c.id for _, c in sorted(children.items())]


def test_a_step_named_like_a_spawn_that_made_no_child_of_the_job_is_kept_as_a_users() -> None:
    steps = {**SPAWNS, **_failed_on("c1"), "spawn:7": '"not-a-child"'}
    kept, children = kept_children(ORIGINAL, steps, CHILDREN, "wait:0")
    assert kept["spawn:7"] == '"not-a-child"' and "spawn:1" not in kept and children == ["c0"]


def test_a_cancelled_original_makes_the_children_cancelled_with_it_again() -> None:
    original = _record("p", JobState.CANCELLED)
    children = {"spawn:0": _record("c0", JobState.COMPLETED, parent="p"),
                "spawn:1": _record("c1", JobState.CANCELLED, parent="p")}
    kept, kids = kept_children(original, {**SPAWNS, "mine": "1"}, children, "mine")
    assert kept == {"spawn:0": '"c0"', "mine": "1"} and kids == ["c0"]


@pytest.mark.usefixtures("worker")
def test_a_rerun_keeping_the_steps_of_a_parent_cancelled_while_it_waited_makes_its_children_again(
        http: httpx.Client, runtime: Runtime, tmp_path: Path) -> None:
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    submitted = http.post("/v1/jobs", headers=ALICE, json={
        "operation": "test.parent", "params": {"ledger": str(ledger), "children": 2, "gate": str(gate)}})
    assert submitted.status_code == 202, submitted.text
    original = submitted.json()["taskId"]
    wait_until(lambda: runtime.store.get(original).state is JobState.SUSPENDED, 20,  # type: ignore[union-attr]
               message="the parent to wait for its children")
    first = [k["taskId"] for k in http.get("/v1/jobs", params={"parent": original}, headers=ALICE).json()["jobs"]]
    assert http.post(f"/v1/jobs/{original}/cancel", headers=ALICE).json()["status"] == "cancelled"
    for kid in first:
        _settled(http, kid, "cancelled")
    gate.touch()
    answer = http.post(f"/v1/jobs/{original}/rerun", json={"keepSteps": True}, headers=ALICE)
    assert answer.status_code in (201, 202), answer.text
    done = _settled(http, answer.json()["taskId"], "completed")
    assert done["result"]["results"] == [{"child": 0}, {"child": 1}]
    assert not set(done["result"]["children"]) & set(first)
