"""Operating on jobs over real HTTP with a real worker: reruns, who may act, combined filters, bulk actions."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ALICE, BOB, OPER, OPS, wait_until

pytestmark = pytest.mark.usefixtures("worker")
DONE = ("completed", "failed", "cancelled")


def effects(ledger: Path) -> list[dict[str, Any]]:
    if not ledger.exists():
        return []
    return [e for e in map(json.loads, ledger.read_text().splitlines()) if e["event"] == "effect"]


def submit(http: httpx.Client, operation: str, params: dict[str, Any], headers: dict[str, str] = ALICE) -> str:
    response = http.post("/v1/jobs", json={"operation": operation, "params": params}, headers=headers)
    assert response.status_code == 202, response.text
    return str(response.json()["taskId"])


def finished(http: httpx.Client, job_id: str, headers: dict[str, str] = ALICE,
             until: tuple[str, ...] = DONE, timeout: float = 20) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        body = http.get(f"/v1/jobs/{job_id}", headers=headers).json()
        return body if body["status"] in until else None

    return wait_until(done, timeout, message=f"job {job_id} to reach {until}")  # type: ignore[no-any-return]


def failed_job(http: httpx.Client, tmp_path: Path, headers: dict[str, str] = ALICE, key: int = 0) -> tuple[str, Path]:
    ledger = tmp_path / f"ledger-{uuid.uuid4().hex[:6]}"
    job_id = submit(http, "test.fails_until", {"ledger": str(ledger), "switch": str(tmp_path / "switch"), "key": key},
                    headers)
    assert finished(http, job_id, headers)["status"] == "failed"
    return job_id, ledger


def problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    return response.json()  # type: ignore[no-any-return]


@pytest.mark.parametrize("keep", [False, True])
def test_a_rerun_is_a_new_job_and_kept_steps_are_not_repeated(http: httpx.Client, tmp_path: Path, keep: bool) -> None:
    original, ledger = failed_job(http, tmp_path)
    assert len(effects(ledger)) == 2
    (tmp_path / "switch").touch()
    response = http.post(f"/v1/jobs/{original}/rerun", json={"keepSteps": keep}, headers=ALICE)
    assert response.status_code == 202, response.text
    handle = response.json()
    assert handle["rerunOf"] == original and handle["taskId"] != original
    assert response.headers["Location"] == f"/v1/jobs/{handle['taskId']}"
    done = finished(http, handle["taskId"])
    assert done["status"] == "completed" and done["operation"] == "test.fails_until", done
    assert done["rerunOf"] == original
    # The downstream (the ledger) saw the original's two effects, and again only without kept steps.
    assert len(effects(ledger)) == (2 if keep else 4)
    assert {e["job"] for e in effects(ledger)} == ({original} if keep else {original, handle["taskId"]})


def test_a_rerun_with_an_idempotency_key_answers_the_same_new_job(http: httpx.Client, tmp_path: Path) -> None:
    original, _ = failed_job(http, tmp_path)
    key = {"Idempotency-Key": f"rerun-{uuid.uuid4()}"}
    first = http.post(f"/v1/jobs/{original}/rerun", headers={**ALICE, **key})
    again = http.post(f"/v1/jobs/{original}/rerun", headers={**ALICE, **key})
    assert first.status_code == again.status_code == 202
    assert first.json()["taskId"] == again.json()["taskId"]
    assert again.headers["Idempotent-Replayed"] == "true"
    other = http.post(f"/v1/jobs/{original}/rerun", json={"keepSteps": True}, headers={**ALICE, **key})
    problem(other, 422)  # the same key for another request


def test_a_job_not_finished_or_completed_cannot_be_rerun(http: httpx.Client, tmp_path: Path) -> None:
    running = submit(http, "test.steps", {"ledger": str(tmp_path / "l"), "steps": 2, "gate": str(tmp_path / "g")})
    finished(http, running, until=("working",))
    body = problem(http.post(f"/v1/jobs/{running}/rerun", headers=ALICE), 409)
    assert body["type"].endswith("/not-finished")
    (tmp_path / "g.1").touch()
    assert finished(http, running)["status"] == "completed"
    problem(http.post(f"/v1/jobs/{running}/rerun", headers=ALICE), 409)
    problem(http.post(f"/v1/jobs/{running}/rerun", json={"keep": True}, headers=ALICE), 400)


def test_an_owner_cannot_act_on_another_owners_job_and_an_admin_only_reads(http: httpx.Client, tmp_path: Path) -> None:
    original, _ = failed_job(http, tmp_path)
    missing = str(uuid.uuid4())
    for who in (BOB, OPS):
        for path in (f"/v1/jobs/{original}/rerun", f"/v1/jobs/{original}/cancel"):
            assert problem(http.post(path, headers=who), 404) == problem(
                http.post(path.replace(original, missing), headers=who), 404)
    assert http.get(f"/v1/jobs/{original}", headers=OPS).status_code == 200
    assert http.get(f"/v1/jobs/{original}", headers=BOB).status_code == 404


def test_an_operator_reruns_and_cancels_for_the_owner_but_never_answers(http: httpx.Client, tmp_path: Path) -> None:
    original, _ = failed_job(http, tmp_path)
    rerun = http.post(f"/v1/jobs/{original}/rerun", headers=OPER)
    assert rerun.status_code == 202, rerun.text
    new_id = rerun.json()["taskId"]
    # The rerun is the original owner's: she sees it, and it is in her listing, not the operator's.
    assert http.get(f"/v1/jobs/{new_id}", headers=ALICE).json()["rerunOf"] == original
    assert new_id in [j["taskId"] for j in http.get("/v1/jobs", params={"limit": 200}, headers=ALICE).json()["jobs"]]
    assert new_id not in [j["taskId"] for j in http.get("/v1/jobs", headers=OPER).json()["jobs"]]

    asking = submit(http, "test.ask_twice", {"ledger": str(tmp_path / "ask")})
    finished(http, asking, until=("input_required",))
    answer = {"inputResponses": {"first": {"action": "accept", "content": {"v": 1}}}}
    assert problem(http.post(f"/v1/jobs/{asking}/input", json=answer, headers=OPER), 404) == problem(
        http.post(f"/v1/jobs/{uuid.uuid4()}/input", json=answer, headers=OPER), 404)
    cancelled = http.post(f"/v1/jobs/{asking}/cancel", headers=OPER)
    assert cancelled.status_code == 202 and cancelled.json()["status"] == "cancelled"
    listed = http.get("/v1/jobs", params={"owner": "alice", "status": "cancelled"}, headers=OPER).json()["jobs"]
    assert asking in [j["taskId"] for j in listed] and all(j["owner"] == "alice" for j in listed)


def test_filters_combine_and_unknown_ones_are_refused(http: httpx.Client, tmp_path: Path) -> None:
    failed, _ = failed_job(http, tmp_path, BOB)
    ok = submit(http, "test.noop", {}, BOB)
    finished(http, ok, BOB)
    after = http.get(f"/v1/jobs/{failed}", headers=BOB).json()["createdAt"]

    def ids(**query: str) -> list[str]:
        response = http.get("/v1/jobs", params={"limit": "200", **query}, headers=BOB)
        assert response.status_code == 200, response.text
        return [j["taskId"] for j in response.json()["jobs"]]

    assert failed in ids(status="failed", operation="test.fails_until")
    assert failed not in ids(status="failed", operation="test.noop")
    assert ok in ids(operation="test.noop", status="completed,failed")
    assert ok in ids(createdAfter=after, status="completed") and failed not in ids(createdAfter=after)
    assert ids(createdBefore="2000-01-01T00:00:00Z") == []
    body = problem(http.get("/v1/jobs", params={"colour": "red"}, headers=BOB), 400)
    assert "colour" in body["detail"]
    assert "createdAfter" in problem(http.get("/v1/jobs", params={"createdAfter": "yesterday"}, headers=BOB),
                                     422)["detail"]
    assert "owner" in problem(http.get("/v1/jobs", params={"owner": "alice"}, headers=BOB), 400)["detail"]
    assert "status" in problem(http.get("/v1/jobs", params={"status": "lost"}, headers=BOB), 400)["detail"]


def test_bulk_refuses_an_unknown_action_or_filter_field_and_does_nothing(http: httpx.Client) -> None:
    before = http.get("/v1/jobs", params={"limit": 200}, headers=ALICE).json()["jobs"]
    assert "explode" in problem(http.post("/v1/jobs/bulk", json={"action": "explode"}, headers=ALICE), 400)["detail"]
    body = problem(http.post("/v1/jobs/bulk", json={"action": "rerun", "filter": {"colour": "red"}},
                             headers=ALICE), 400)
    assert "colour" in body["detail"]
    problem(http.post("/v1/jobs/bulk", json={"action": "rerun", "filter": {"owner": "bob"}}, headers=ALICE), 400)
    assert http.get("/v1/jobs", params={"limit": 200}, headers=ALICE).json()["jobs"] == before


def bulk(http: httpx.Client, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    response = http.post("/v1/jobs/bulk", json=body, headers=headers)
    assert response.status_code == 202, response.text
    done = finished(http, response.json()["taskId"], headers, timeout=60)
    assert done["status"] == "completed", done
    return done


def test_bulk_rerun_reruns_each_failed_job_once(http: httpx.Client, users: Any, tmp_path: Path) -> None:
    _, token = users.new("bulk")
    me = {"Authorization": f"Bearer {token}"}
    ledger, switch = tmp_path / "ledger", tmp_path / "switch"
    originals = [submit(http, "test.fails_until", {"ledger": str(ledger), "switch": str(switch), "key": i}, me)
                 for i in range(50)]
    for job_id in originals:
        finished(http, job_id, me)
    flt = {"status": "failed", "operation": "test.fails_until"}
    dry = bulk(http, {"action": "rerun", "filter": flt, "dryRun": True}, me)
    assert dry["result"]["matched"] == 50 and dry["result"]["done"] == 0
    assert sorted(dry["result"]["ids"]) == sorted(originals)
    switch.touch()
    done = bulk(http, {"action": "rerun", "filter": flt}, me)
    result = done["result"]
    assert result["matched"] == result["done"] == 50 and result["skipped"] == 0, result
    assert done["progress"] == {"done": 50, "total": 50}
    assert sorted(result["ids"]) == sorted(originals) and len(set(result["newIds"])) == 50
    reruns = [finished(http, new_id, me) for new_id in result["newIds"]]
    assert sorted(r["rerunOf"] for r in reruns) == sorted(originals)
    assert all(r["status"] == "completed" for r in reruns)
    runs = [e["key"] for e in effects(ledger) if e["step"] == 0]
    assert sorted(runs) == sorted(list(range(50)) * 2)  # each original once, each rerun once
    # The originals stay failed (a rerun is a job of its own); the reruns completed and are not matched.
    again = bulk(http, {"action": "rerun", "filter": flt, "dryRun": True}, me)["result"]
    assert sorted(again["ids"]) == sorted(originals)


def test_an_operators_bulk_cancel_spans_owners(http: httpx.Client, tmp_path: Path) -> None:
    gate = str(tmp_path / "never")
    mine = [submit(http, "test.steps", {"ledger": str(tmp_path / f"l{i}"), "steps": 2, "gate": gate}, who)
            for i, who in enumerate((ALICE, BOB))]
    done = bulk(http, {"action": "cancel", "filter": {"owner": "*", "status": "working", "operation": "test.steps",
                                                      "createdAfter": "2000-01-01T00:00:00Z"}}, OPER)
    assert set(mine) <= set(done["result"]["ids"])
    assert [finished(http, job_id, who)["status"] for job_id, who in zip(mine, (ALICE, BOB), strict=True)] == [
        "cancelled", "cancelled"]
