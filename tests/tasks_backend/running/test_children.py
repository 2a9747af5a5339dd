"""Child jobs over a real worker and real HTTP: `ctx.spawn` and `ctx.wait_for` (holding no worker while waiting),
`ChildFailed`, the cascade of a parent's cancel, and `GET /v1/jobs?parent=`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tasks_backend import Principal
from tasks_backend.errors import StoreUnavailable
from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import Runtime, build_runtime
from tests.conftest import ALICE, BOB, make_settings, wait_until
from tests.support.waits import assert_a_parent_woken_as_it_parks_is_published

pytestmark = pytest.mark.usefixtures("worker")
A = Principal("alice")


def lines(ledger: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in ledger.read_text().splitlines()] if ledger.exists() else []


def submit(http: httpx.Client, operation: str, params: dict[str, Any], priority: int = 5) -> str:
    response = http.post("/v1/jobs", json={"operation": operation, "params": params, "priority": priority},
                         headers=ALICE)
    assert response.status_code == 202, response.text
    return str(response.json()["taskId"])


def settled(http: httpx.Client, job_id: str, status: str = "completed") -> dict[str, Any]:
    return wait_until(lambda: (j := http.get(f"/v1/jobs/{job_id}", headers=ALICE).json())["status"] == status and j,
                      20, message=f"{job_id} to be {status}")


def children_of(http: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    response = http.get("/v1/jobs", params={"parent": job_id}, headers=ALICE)
    assert response.status_code == 200, response.text
    return list(response.json()["jobs"])


def test_a_parent_gets_its_childrens_results_in_order_and_lists_them(http: httpx.Client, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    parent = submit(http, "test.parent", {"ledger": str(ledger), "children": 3})
    done = settled(http, parent)
    assert done["result"]["results"] == [{"child": 0}, {"child": 1}, {"child": 2}]
    kids = children_of(http, parent)
    assert sorted(k["taskId"] for k in kids) == sorted(done["result"]["children"])
    assert {k["parentId"] for k in kids} == {parent} and "parentId" not in done
    assert sorted(e["index"] for e in lines(ledger) if e["event"] == "child") == [0, 1, 2]
    # Another owner's parent lists nothing: it reads as missing, like the job itself.
    assert http.get("/v1/jobs", params={"parent": parent}, headers=BOB).status_code == 404
    assert http.get("/v1/jobs", params={"parent": "not-a-job"}, headers=ALICE).status_code == 404
    assert children_of(http, kids[0]["taskId"]) == []


def test_a_waiting_parent_holds_no_worker_and_says_what_it_waits_for(
        http: httpx.Client, runtime: Runtime, tmp_path: Path) -> None:
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    # Five parents of one gated child each, on a worker of four slots: a parent that held its slot while
    # waiting would leave its child no slot to run in. The parents go first (priority 9, their children 5): the
    # first parents' children are spawned while the test still submits, and four gated children started before
    # the fifth parent would hold every slot until the gate opens.
    parents = [submit(http, "test.parent", {"ledger": str(ledger), "children": 1, "gate": str(gate)}, priority=9)
               for _ in range(5)]
    wait_until(lambda: all(runtime.store.get(p).state is JobState.SUSPENDED for p in parents), 20,  # type: ignore[union-attr]
               message="every parent to wait")
    shown = http.get(f"/v1/jobs/{parents[0]}", headers=ALICE).json()
    assert (shown["status"], shown["statusMessage"]) == ("working", "Waiting for 1 child job.")
    gate.touch()
    for p in parents:
        assert settled(http, p)["result"]["results"] == [{"child": 0}]


def test_a_parent_whose_child_ends_just_before_it_parks_is_handed_to_the_workers_at_once(
        redis_base: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The child ends after the parent saw it running and before the parent's park: the park's own look at the
    # children then wakes the parent while its run is still under way. The dispatch gate must by then count the
    # run as over, or it takes the wake for a second admission of a job in flight and publishes nothing (the
    # parent would wait for the sweeper). No worker consumes this runtime's queue: the test runs each job itself.
    assert_a_parent_woken_as_it_parks_is_published(build_runtime(make_settings(redis_base)), tmp_path, monkeypatch)


@pytest.mark.parametrize("how", ["failed", "cancelled"])
def test_child_failed_says_which_child_and_why(http: httpx.Client, runtime: Runtime, tmp_path: Path,
                                               how: str) -> None:
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    params = {"ledger": str(ledger), "children": 3, "catch": True, "gate": str(gate)}
    parent = submit(http, "test.parent", params | ({"fail": 1} if how == "failed" else {}))
    kids = wait_until(lambda: len(k := children_of(http, parent)) == 3 and k, 20, message="three children")
    second = next(k["taskId"] for k in kids if runtime.service.get(A, k["taskId"]).params["index"] == 1)
    if how == "cancelled":
        assert http.post(f"/v1/jobs/{second}/cancel", headers=ALICE).json()["status"] == "cancelled"
    gate.touch()
    result = settled(http, parent)["result"]
    assert (result["failed"], result["state"]) == (second, how)
    if how == "failed":
        assert result["error"]["message"] == "child 1 failed"
    # Uncaught, ChildFailed fails the parent with its message.
    plain = submit(http, "test.parent", {"ledger": str(ledger), "children": 2, "fail": 0})
    error = settled(http, plain, "failed")["error"]
    assert error["type"] == "ChildFailed" and "child 0 failed" in error["message"]


def test_cancelling_the_parent_cancels_its_unfinished_children(
        http: httpx.Client, runtime: Runtime, tmp_path: Path) -> None:
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    parent = submit(http, "test.parent", {"ledger": str(ledger), "children": 3, "gate": str(gate)})
    wait_until(lambda: runtime.store.get(parent).state is JobState.SUSPENDED  # type: ignore[union-attr]
               and sum(e["event"] == "child start" for e in lines(ledger)) == 3, 20,
               message="the parent to wait and its children to run")
    kids = children_of(http, parent)
    assert http.post(f"/v1/jobs/{parent}/cancel", headers=ALICE).json()["status"] == "cancelled"
    assert {http.get(f"/v1/jobs/{k['taskId']}", headers=ALICE).json()["status"] for k in kids} == {"cancelled"}
    gate.touch()
    # Fenced out, a child records nothing more (what its code does before its next cancellation point, a few
    # hundredths of a second, stays done, as for any cancel).
    wait_until(lambda: sum(e["event"] == "child start" for e in lines(ledger)) == 3, 5)
    assert [runtime.store.recorded_step(k["taskId"], "effect") for k in kids] == [None] * 3
    assert {runtime.store.get(k["taskId"]).state for k in kids} == {JobState.CANCELLED}  # type: ignore[union-attr]


def test_a_spawn_made_again_gets_the_same_child(runtime: Runtime, tmp_path: Path) -> None:
    """The worker may die between making a child and recording the spawn: the replay's spawn, with the same
    key (derived from the parent and the step), finds the child made before."""
    parent, _ = runtime.service.submit(A, "test.noop", {})
    params = {"ledger": str(tmp_path / "ledger"), "index": 0}
    first = runtime.spawn("alice", "test.child", params, "spawn-key", parent.id)
    again = runtime.spawn("alice", "test.child", params, "spawn-key", parent.id)
    assert first == again and runtime.store.child_ids(parent.id) == [first]
    assert runtime.service.get(A, first).parent_id == parent.id


def test_a_spawn_whose_reply_is_lost_in_an_outage_is_made_again_and_gets_the_same_child(
        redis_base: str, tmp_path: Path) -> None:
    # Redis applied the child's submit and the reply was lost (the store was unreachable for a moment): the spawn
    # is made again with the same key and finds that child, and the parent goes on to wait for it, not fails.
    runtime = build_runtime(make_settings(redis_base))
    store, executor = runtime.store, runtime.executor()
    parent, _ = runtime.service.submit("alice", "test.parent", {"ledger": str(tmp_path / "ledger"), "children": 1})
    spawn, made = executor.spawner, []
    assert spawn is not None

    def reply_lost_once(*args: Any) -> str:
        made.append(spawn(*args))
        if len(made) == 1:
            raise StoreUnavailable()
        return made[-1]

    executor.spawner = reply_lost_once
    assert executor.run(parent.id) == "suspended"
    assert len(made) == 2 and made[0] == made[1] and store.child_ids(parent.id) == made[:1]


def test_a_sleep_started_in_an_outage_parks_once_redis_answers(redis_base: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = build_runtime(make_settings(redis_base))
    store, executor = runtime.store, runtime.executor()
    job, _ = runtime.service.submit("alice", "test.sleeper", {"seconds": 30})
    now_ms, calls = store.now_ms, []

    def unreachable_once() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise StoreUnavailable()
        return now_ms()

    monkeypatch.setattr(store, "now_ms", unreachable_once)
    assert executor.run(job.id) == "suspended"
    assert store.get(job.id).state is JobState.SUSPENDED  # type: ignore[union-attr]
