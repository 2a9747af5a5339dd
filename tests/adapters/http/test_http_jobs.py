"""The plain-HTTP adapter against a real Redis and a real Celery worker."""

from __future__ import annotations

import json
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ALICE, BOB, OPS, bearer, wait_until

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
pytestmark = pytest.mark.usefixtures("worker")


def submit(client: Any, operation: str, params: dict[str, Any], headers: dict[str, str] = ALICE,
           **extra_headers: str) -> Any:
    response = client.post("/v1/jobs", json={"operation": operation, "params": params},
                           headers={**headers, **extra_headers})
    assert response.status_code == 202, response.get_data(as_text=True)
    return response


def poll(client: Any, job_id: str, headers: dict[str, str] = ALICE, until: tuple[str, ...] = (
        "completed", "failed", "cancelled"), timeout: float = 20) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        body = client.get(f"/v1/jobs/{job_id}", headers=headers).get_json()
        return body if body["status"] in until else None

    return wait_until(done, timeout, message=f"job {job_id} to reach {until}")  # type: ignore[no-any-return]


def assert_problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "application/problem+json"
    body = response.get_json()
    assert body["status"] == status and body["type"].startswith("https://") and body["title"]
    return body  # type: ignore[no-any-return]


def test_submit_returns_a_handle_at_once(client: Any) -> None:
    response = submit(client, "demo.sleep", {"seconds": 0.2, "steps": 2})
    handle = response.get_json()
    assert uuid.UUID(handle["taskId"]).version == 4
    assert response.headers["Location"] == f"/v1/jobs/{handle['taskId']}"
    assert response.headers["Retry-After"] == "1"
    assert handle["status"] == "working"
    assert RFC3339.match(handle["createdAt"]) and RFC3339.match(handle["lastUpdatedAt"])
    assert handle["ttlMs"] == 3_600_000 and handle["pollIntervalMs"] == 1000
    done = poll(client, handle["taskId"])
    assert done["status"] == "completed" and done["result"] == {"slept": 0.2}
    assert done["createdAt"] == handle["createdAt"]
    result = client.get(f"/v1/jobs/{handle['taskId']}/result", headers=ALICE)
    assert result.status_code == 200 and result.get_json() == {"slept": 0.2}


def test_last_updated_moves_only_when_the_job_changes(client: Any) -> None:
    job_id = submit(client, "test.noop", {}).get_json()["taskId"]
    done = poll(client, job_id)
    again = client.get(f"/v1/jobs/{job_id}", headers=ALICE).get_json()
    assert again["lastUpdatedAt"] == done["lastUpdatedAt"]
    assert "Retry-After" not in client.get(f"/v1/jobs/{job_id}", headers=ALICE).headers


def test_result_before_completion_is_202_with_the_handle(client: Any, tmp_path: Path) -> None:
    job_id = submit(client, "test.spin", {"ledger": str(tmp_path / "l")}).get_json()["taskId"]
    pending = client.get(f"/v1/jobs/{job_id}/result", headers=ALICE)
    assert pending.status_code == 202 and pending.get_json()["taskId"] == job_id
    assert pending.headers["Retry-After"]
    client.post(f"/v1/jobs/{job_id}/cancel", headers=ALICE)
    poll(client, job_id)


def test_failing_job_reports_its_error(client: Any) -> None:
    job_id = submit(client, "demo.fail", {"message": "disk full"}).get_json()["taskId"]
    failed = poll(client, job_id)
    assert failed["status"] == "failed"
    assert failed["error"] == {"message": "disk full", "type": "DemoFailure"}
    result = client.get(f"/v1/jobs/{job_id}/result", headers=ALICE)
    assert result.status_code == 409 and result.get_json()["error"]["message"] == "disk full"


def test_export_reports_progress_and_returns_csv(client: Any) -> None:
    job_id = submit(client, "demo.export", {"rows": 2500}).get_json()["taskId"]
    done = poll(client, job_id)
    assert done["result"]["rows"] == 2500
    assert done["result"]["csv"].splitlines()[0] == "id,name,amount"
    assert len(done["result"]["csv"].splitlines()) == 2501
    assert done["progress"] == {"done": 2500.0, "total": 2500.0}


def test_cancel_running_job_stops_at_next_check(client: Any, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    job_id = submit(client, "test.spin", {"ledger": str(ledger)}).get_json()["taskId"]
    wait_until(lambda: ledger.exists(), message="the job to start")
    cancelling = client.post(f"/v1/jobs/{job_id}/cancel", headers=ALICE)
    assert cancelling.status_code == 202 and cancelling.get_json()["taskId"] == job_id
    # One cancel for every protocol: the answer shows the job cancelled now, not "requested".
    assert cancelling.get_json()["status"] == "cancelled"
    assert client.get(f"/v1/jobs/{job_id}", headers=ALICE).get_json()["status"] == "cancelled"
    again = client.post(f"/v1/jobs/{job_id}/cancel", headers=ALICE)
    assert_problem(again, 409)


def test_cancel_finished_job_is_409(client: Any) -> None:
    job_id = submit(client, "test.noop", {}).get_json()["taskId"]
    poll(client, job_id)
    assert_problem(client.post(f"/v1/jobs/{job_id}/cancel", headers=ALICE), 409)


def test_listing_is_own_jobs_newest_first_with_cursor(client: Any, users: Any) -> None:
    _, token = users.new("lister")
    me = bearer(token)
    ids = [submit(client, "test.noop", {}, me).get_json()["taskId"] for _ in range(5)]
    submit(client, "test.noop", {}, BOB)
    seen: list[str] = []
    cursor = None
    while True:
        query = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = client.get("/v1/jobs", query_string=query, headers=me).get_json()
        seen += [j["taskId"] for j in page["jobs"]]
        cursor = page["nextCursor"]
        if not cursor:
            break
    assert seen == list(reversed(ids))
    for job_id in ids:
        poll(client, job_id, me)
    completed = client.get("/v1/jobs", query_string={"status": "completed"}, headers=me).get_json()
    assert len(completed["jobs"]) == 5
    assert client.get("/v1/jobs", query_string={"status": "failed"}, headers=me).get_json()["jobs"] == []


def test_idempotency_key_same_request_same_handle(client: Any, tmp_path: Path) -> None:
    ledger = tmp_path / "runs"
    params = {"ledger": str(ledger), "steps": 1}
    first = submit(client, "test.steps", params, **{"Idempotency-Key": "order-1"})
    second = submit(client, "test.steps", params, **{"Idempotency-Key": "order-1"})
    assert second.get_json()["taskId"] == first.get_json()["taskId"]
    assert second.headers["Idempotent-Replayed"] == "true"
    poll(client, first.get_json()["taskId"])
    # the same key belongs to alice only: bob gets his own job
    bob = submit(client, "test.steps", params, BOB, **{"Idempotency-Key": "order-1"})
    assert bob.get_json()["taskId"] != first.get_json()["taskId"]
    poll(client, bob.get_json()["taskId"], BOB)
    effects = [json.loads(x) for x in ledger.read_text().splitlines() if '"effect"' in x]
    assert len(effects) == 2


def test_twenty_concurrent_duplicates_make_one_job(live_url: str, tmp_path: Path, users: Any) -> None:
    _, token = users.new("dupes")
    ledger = tmp_path / "runs"
    body = {"operation": "test.steps", "params": {"ledger": str(ledger), "steps": 1}}
    headers = {**bearer(token), "Idempotency-Key": "burst"}

    def one(_: int) -> str:
        with httpx.Client(base_url=live_url, timeout=20) as c:
            r = c.post("/v1/jobs", json=body, headers=headers)
            assert r.status_code == 202, r.text
            return str(r.json()["taskId"])

    with ThreadPoolExecutor(20) as pool:
        ids = set(pool.map(one, range(20)))
    assert len(ids) == 1
    job_id = ids.pop()
    with httpx.Client(base_url=live_url, timeout=20) as c:
        wait_until(lambda: c.get(f"/v1/jobs/{job_id}", headers=bearer(token)).json()["status"] == "completed",
                   20, message="the job to complete")
        listed = c.get("/v1/jobs", headers=bearer(token)).json()["jobs"]
    assert [j["taskId"] for j in listed] == [job_id]
    starts = [x for x in ledger.read_text().splitlines() if '"start"' in x]
    assert len(starts) == 1


def test_idempotency_key_with_different_request_is_422_and_creates_nothing(client: Any, users: Any) -> None:
    _, token = users.new("idem")
    me = bearer(token)
    submit(client, "demo.sleep", {"seconds": 0}, me, **{"Idempotency-Key": "k"})
    clash = client.post("/v1/jobs", json={"operation": "demo.sleep", "params": {"seconds": 1}},
                        headers={**me, "Idempotency-Key": "k"})
    assert_problem(clash, 422)
    assert len(client.get("/v1/jobs", headers=me).get_json()["jobs"]) == 1


def test_operations_publish_json_schemas(client: Any) -> None:
    ops = {o["name"]: o for o in client.get("/v1/operations", headers=ALICE).get_json()["operations"]}
    assert {"demo.sleep", "demo.export", "demo.refund", "demo.fail"} <= set(ops)
    sleep = ops["demo.sleep"]["paramsSchema"]
    assert sleep["type"] == "object" and sleep["required"] == ["seconds"]
    assert sleep["properties"]["steps"] == {"type": "integer", "default": 10, "minimum": 1, "maximum": 10000}


def test_openapi_health_and_metrics(client: Any) -> None:
    spec = client.get("/openapi.json").get_json()
    assert spec["openapi"].startswith("3.1") and "/v1/jobs/{job_id}" in spec["paths"]
    health = client.get("/healthz")
    assert health.status_code == 200 and health.get_json()["checks"] == {"redis": True, "broker": True}
    metrics = client.get("/metrics", headers=ALICE)
    assert metrics.status_code == 200 and b"tasks_backend_queue_depth" in metrics.data


def test_admin_reads_any_job_but_cannot_cancel_it(client: Any, tmp_path: Path) -> None:
    job_id = submit(client, "test.spin", {"ledger": str(tmp_path / "l")}).get_json()["taskId"]
    assert client.get(f"/v1/jobs/{job_id}", headers=OPS).status_code == 200
    assert_problem(client.post(f"/v1/jobs/{job_id}/cancel", headers=OPS), 404)
    client.post(f"/v1/jobs/{job_id}/cancel", headers=ALICE)
    poll(client, job_id)


def test_events_stream_each_change_until_terminal(live_url: str) -> None:
    with httpx.Client(base_url=live_url, timeout=20) as c:
        job_id = c.post("/v1/jobs", json={"operation": "demo.sleep", "params": {"seconds": 0.6, "steps": 3}},
                        headers=ALICE).json()["taskId"]
        handles = []
        ids = []
        with c.stream("GET", f"/v1/jobs/{job_id}/events", headers=ALICE) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            for line in stream.iter_lines():
                if line.startswith("id: "):
                    ids.append(line[4:])
                if line.startswith("data: "):
                    handles.append(json.loads(line[6:]))
        assert handles[-1]["status"] == "completed" and handles[-1]["result"] == {"slept": 0.6}
        assert all(h["taskId"] == job_id for h in handles)
        assert any(h.get("progress", {}).get("done") == 2 for h in handles)
        # resuming after the last event id sends the final state and ends
        with c.stream("GET", f"/v1/jobs/{job_id}/events", headers={**ALICE, "Last-Event-ID": ids[-1]}) as again:
            data = [json.loads(x[6:]) for x in again.iter_lines() if x.startswith("data: ")]
        assert [h["status"] for h in data] == ["completed"]
