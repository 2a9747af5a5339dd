"""Human in the loop: parked jobs hold no worker; answers, rejections, partial answers, cancellation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ALICE, BOB, wait_until

pytestmark = pytest.mark.usefixtures("worker")


def submit(client: Any, operation: str, params: dict[str, Any]) -> str:
    response = client.post("/v1/jobs", json={"operation": operation, "params": params}, headers=ALICE)
    assert response.status_code == 202
    return str(response.get_json()["taskId"])


def status(client: Any, job_id: str) -> dict[str, Any]:
    return client.get(f"/v1/jobs/{job_id}", headers=ALICE).get_json()  # type: ignore[no-any-return]


def parked(client: Any, job_id: str) -> dict[str, Any]:
    return wait_until(lambda: (s := status(client, job_id))["status"] == "input_required" and s,  # type: ignore[no-any-return]
                      message="the job to ask for input")


def finished(client: Any, job_id: str) -> dict[str, Any]:
    return wait_until(lambda: (s := status(client, job_id))["status"] in ("completed", "failed", "cancelled") and s,  # type: ignore[no-any-return]
                      15, message="the job to finish")


def answer(client: Any, job_id: str, responses: dict[str, Any], headers: dict[str, str] = ALICE) -> Any:
    return client.post(f"/v1/jobs/{job_id}/input", json={"inputResponses": responses}, headers=headers)


def test_refund_asks_then_issues_once_when_approved(client: Any, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = tmp_path / "refunds"
    monkeypatch.setenv("TASKS_BACKEND_DEMO_LEDGER", str(ledger))
    job_id = submit(client, "demo.refund", {"order_id": "A-1", "amount": 12.5})
    handle = parked(client, job_id)
    request = handle["inputRequests"]["approval"]
    assert request["method"] == "elicitation/create"
    assert request["params"]["mode"] == "form" and "A-1" in request["params"]["message"]
    assert request["params"]["requestedSchema"]["required"] == ["approved"]
    assert "Retry-After" in client.get(f"/v1/jobs/{job_id}", headers=ALICE).headers
    accepted = answer(client, job_id, {"approval": {"approved": True}, "unknown": 1})
    assert accepted.status_code == 202
    done = finished(client, job_id)
    assert done["status"] == "completed" and done["result"]["status"] == "approved"
    lines = [json.loads(x) for x in ledger.read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["refundId"] == done["result"]["refundId"]
    assert answer(client, job_id, {"approval": {"approved": True}}).status_code == 409


@pytest.mark.parametrize("response", [{"approved": False, "reason": "no receipt"}, {"action": "decline"}])
def test_refund_rejected(client: Any, response: dict[str, Any]) -> None:
    job_id = submit(client, "demo.refund", {"order_id": "A-2", "amount": 3})
    parked(client, job_id)
    assert answer(client, job_id, {"approval": response}).status_code == 202
    assert finished(client, job_id)["result"]["status"] == "rejected"


def test_answer_must_match_the_requested_schema(client: Any) -> None:
    job_id = submit(client, "demo.refund", {"order_id": "A-3", "amount": 3})
    parked(client, job_id)
    bad = answer(client, job_id, {"approval": {"approved": "maybe"}})
    assert bad.status_code == 422 and "approval" in bad.get_json()["errors"]
    assert answer(client, job_id, {"approval": {}}).status_code == 422
    assert status(client, job_id)["status"] == "input_required"
    client.post(f"/v1/jobs/{job_id}/cancel", headers=ALICE)


def test_partial_answers_keep_the_job_parked(client: Any) -> None:
    job_id = submit(client, "test.ask_pair", {})
    first = parked(client, job_id)
    assert set(first["inputRequests"]) == {"name", "size"}
    assert answer(client, job_id, {"name": {"name": "Ada"}}).status_code == 202
    still = status(client, job_id)
    assert still["status"] == "input_required" and set(still["inputRequests"]) == {"size"}
    assert still["lastUpdatedAt"] >= first["lastUpdatedAt"]
    # an answer to a key already answered is ignored
    assert answer(client, job_id, {"name": {"name": "Bob"}, "size": {"size": 3}}).status_code == 202
    assert finished(client, job_id)["result"] == {"name": {"name": "Ada"}, "size": {"size": 3}}


def test_sequential_questions_replay_recorded_steps(client: Any, tmp_path: Path) -> None:
    ledger = tmp_path / "effects"
    job_id = submit(client, "test.ask_twice", {"ledger": str(ledger)})
    parked(client, job_id)
    answer(client, job_id, {"first": {"v": 1}})
    second = wait_until(lambda: "second" in (status(client, job_id).get("inputRequests") or {}),
                        message="the second question")
    assert second
    answer(client, job_id, {"second": {"action": "accept", "content": {"v": 2}}})
    assert finished(client, job_id)["result"] == {"first": {"v": 1}, "mid": "done", "second": {"v": 2}}
    assert len(ledger.read_text().splitlines()) == 1


def test_cancel_parked_job(client: Any) -> None:
    job_id = submit(client, "demo.refund", {"order_id": "A-4", "amount": 1})
    parked(client, job_id)
    assert answer(client, job_id, {"approval": {"approved": True}}, BOB).status_code == 404
    cancelled = client.post(f"/v1/jobs/{job_id}/cancel", headers=ALICE)
    assert cancelled.status_code == 202 and cancelled.get_json()["status"] == "cancelled"
    assert answer(client, job_id, {"approval": {"approved": True}}).status_code == 409


def test_input_to_a_job_not_waiting_is_409(client: Any) -> None:
    job_id = submit(client, "test.noop", {})
    finished(client, job_id)
    assert answer(client, job_id, {"x": 1}).status_code == 409


def test_a_question_with_nullable_fields_is_answered_over_http(http: Any) -> None:
    """`fields.String(allow_none=True)` publishes `"type": ["string", "null"]`: null and a string are both answers,
    anything else is a 422 naming the field (it was a 500 from the validator)."""
    submitted = http.post("/v1/jobs", json={"operation": "test.ask_nullable", "params": {}}, headers=ALICE)
    job_id = submitted.json()["taskId"]
    asked = wait_until(lambda: (s := http.get(f"/v1/jobs/{job_id}", headers=ALICE).json())["status"]
                       == "input_required" and s, message="the job to ask")
    schema = asked["inputRequests"]["note"]["params"]["requestedSchema"]
    assert schema["properties"]["note"]["type"] == ["string", "null"] and schema["required"] == ["copies"]

    def post(content: Any) -> httpx.Response:
        return http.post(f"/v1/jobs/{job_id}/input", json={"inputResponses": {"note": content}}, headers=ALICE)

    for bad, errors in (({"note": 5, "copies": 1}, ["note: must be string or null"]),
                        ({"note": "x"}, ["copies: required"]),
                        ({"copies": "two"}, ["copies: must be integer or null"]),
                        ({"copies": 1, "extra": True}, ["extra: not asked for"])):
        refused = post(bad)
        assert refused.status_code == 422, (bad, refused.text)
        assert refused.headers["Content-Type"] == "application/problem+json"
        assert refused.json()["errors"] == {"note": errors}
    assert http.get(f"/v1/jobs/{job_id}", headers=ALICE).json()["status"] == "input_required"
    assert post({"note": None, "copies": None}).status_code == 202
    done = wait_until(lambda: (s := http.get(f"/v1/jobs/{job_id}", headers=ALICE).json())["status"]
                      in ("completed", "failed") and s, 15, message="the job to finish")
    assert done["result"] == {"note": None, "copies": None}
