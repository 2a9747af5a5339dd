"""Every route: no token, a bad token, the owner, and another owner (who must learn nothing)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.conftest import ALICE, BOB, bearer, wait_until

pytestmark = pytest.mark.usefixtures("worker")

ROUTES = [
    ("GET", "/v1/jobs/{id}", None),
    ("GET", "/v1/jobs/{id}/result", None),
    ("GET", "/v1/jobs/{id}/events", None),
    ("POST", "/v1/jobs/{id}/cancel", None),
    ("POST", "/v1/jobs/{id}/input", {"inputResponses": {"approval": {"approved": True}}}),
]
COLLECTION = [
    ("POST", "/v1/jobs", {"operation": "test.noop", "params": {}}),
    ("GET", "/v1/jobs", None),
    ("GET", "/v1/operations", None),
    ("GET", "/metrics", None),
]


@pytest.fixture(scope="module")
def parked_job(flask_app: Any) -> str:
    """A job of alice's parked on input (so that every route has something to act on)."""
    client = flask_app.test_client()
    job_id = client.post("/v1/jobs", json={"operation": "demo.refund", "params": {"order_id": "A1", "amount": 5}},
                         headers=ALICE).get_json()["taskId"]
    wait_until(lambda: client.get(f"/v1/jobs/{job_id}", headers=ALICE).get_json()["status"] == "input_required",
               message="the refund to ask for approval")
    return str(job_id)


def call(client: Any, method: str, path: str, body: Any, headers: dict[str, str]) -> Any:
    return client.open(path, method=method, json=body, headers=headers)


@pytest.mark.parametrize(("method", "path", "body"), ROUTES + COLLECTION)
@pytest.mark.parametrize("headers", [{}, bearer("not-a-token"), {"Authorization": "Basic YWxpY2U6eA=="},
                                     {"Authorization": "Bearer"}], ids=["none", "bad", "basic", "empty"])
def test_without_valid_token_401(client: Any, parked_job: str, method: str, path: str, body: Any,
                                 headers: dict[str, str]) -> None:
    response = call(client, method, path.format(id=parked_job), body, headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.mimetype == "application/problem+json"


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
def test_another_owner_sees_exactly_a_missing_job(client: Any, parked_job: str, method: str, path: str,
                                                  body: Any) -> None:
    theirs = call(client, method, path.format(id=parked_job), body, BOB)
    missing = call(client, method, path.format(id=str(uuid.uuid4())), body, BOB)
    malformed = call(client, method, path.format(id="nope"), body, BOB)
    assert theirs.status_code == missing.status_code == malformed.status_code == 404
    assert theirs.get_json() == missing.get_json() == malformed.get_json()
    assert parked_job not in theirs.get_data(as_text=True)
    assert dict(theirs.headers).keys() == dict(missing.headers).keys()
    # and nothing changed for the owner
    assert client.get(f"/v1/jobs/{parked_job}", headers=ALICE).get_json()["status"] == "input_required"


@pytest.mark.parametrize(("method", "path", "body"), ROUTES[:3])
def test_owner_reads(client: Any, parked_job: str, method: str, path: str, body: Any) -> None:
    response = call(client, method, path.format(id=parked_job), body, ALICE)
    assert response.status_code in (200, 202)


def test_public_paths_need_no_token(client: Any) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/openapi.json").status_code == 200


def test_tokens_file_is_reread(client: Any, users: Any) -> None:
    _, token = users.new("late")
    response = client.post("/v1/jobs", json={"operation": "test.noop"}, headers=bearer(token))
    assert response.status_code == 202
