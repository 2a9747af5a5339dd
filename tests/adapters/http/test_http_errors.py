"""Bad input on every route: a problem+json 4xx that says what is wrong, never a 500."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import ALICE

#: A job no one made (fixed: parallel test runs must collect the same test ids).
JOB = "5b0e2f7c-9d41-4c8a-a3e6-1f7d2b9c4e80"


def problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "application/problem+json"
    body = response.get_json()
    assert set(body) >= {"type", "title", "status", "detail"} and body["status"] == status
    assert "Traceback" not in response.get_data(as_text=True)
    return body  # type: ignore[no-any-return]


@pytest.mark.parametrize(("body", "status", "slug"), [
    (b"", 400, "bad-request"),
    (b"{not json", 400, "bad-request"),
    (b"[1, 2]", 400, "bad-request"),
    (b'"text"', 400, "bad-request"),
    (b"{}", 400, "bad-request"),
    (b'{"operation": 7}', 400, "bad-request"),
    (b'{"operation": "demo.sleep", "extra": 1}', 400, "bad-request"),
    (b'{"operation": "no.such"}', 422, "unknown-operation"),
    (b'{"operation": "demo.sleep"}', 422, "invalid-params"),
    (b'{"operation": "demo.sleep", "params": []}', 422, "invalid-params"),
    (b'{"operation": "demo.sleep", "params": {"seconds": "soon"}}', 422, "invalid-params"),
    (b'{"operation": "demo.sleep", "params": {"seconds": -1}}', 422, "invalid-params"),
    (b'{"operation": "demo.sleep", "params": {"seconds": 1, "bogus": 1}}', 422, "invalid-params"),
    (b"\xff\xfe", 400, "bad-request"),
])
def test_submit_rejects_bad_bodies(client: Any, body: bytes, status: int, slug: str) -> None:
    response = client.post("/v1/jobs", data=body, headers={**ALICE, "Content-Type": "application/json"})
    assert problem(response, status)["type"].endswith("/" + slug)


def test_invalid_params_name_the_fields(client: Any) -> None:
    response = client.post("/v1/jobs", json={"operation": "demo.sleep", "params": {"seconds": "x"}}, headers=ALICE)
    assert "seconds" in problem(response, 422)["errors"]


def test_unknown_operation_lists_the_known_ones(client: Any) -> None:
    response = client.post("/v1/jobs", json={"operation": "nope"}, headers=ALICE)
    assert "demo.sleep" in problem(response, 422)["operations"]


def test_oversized_body_is_413(client: Any, flask_app: Any) -> None:
    big = b'{"operation": "demo.sleep", "params": {"pad": "' + b"x" * (2 * 1024 * 1024) + b'"}}'
    problem(client.post("/v1/jobs", data=big, headers={**ALICE, "Content-Type": "application/json"}), 413)


def test_idempotency_key_too_long_is_400(client: Any) -> None:
    response = client.post("/v1/jobs", json={"operation": "test.noop"},
                           headers={**ALICE, "Idempotency-Key": "k" * 300})
    problem(response, 400)


@pytest.mark.parametrize("query", [{"limit": "x"}, {"limit": "0"}, {"limit": "100000"}, {"status": "bogus"},
                                   {"cursor": "!!!"}, {"cursor": "bm90LWEtY3Vyc29y"}])
def test_listing_rejects_bad_queries(client: Any, query: dict[str, str]) -> None:
    problem(client.get("/v1/jobs", query_string=query, headers=ALICE), 400)


@pytest.mark.parametrize("body", [b"", b"[]", b"{}", b'{"inputResponses": []}', b'{"inputResponses": {}}'])
def test_input_rejects_bad_bodies(client: Any, body: bytes) -> None:
    response = client.post(f"/v1/jobs/{JOB}/input", data=body, headers={**ALICE, "Content-Type": "application/json"})
    assert response.status_code in (400, 422)
    problem(response, response.status_code)


def test_events_rejects_a_bad_last_event_id(client: Any) -> None:
    problem(client.get(f"/v1/jobs/{JOB}/events", headers={**ALICE, "Last-Event-ID": "x"}), 400)


@pytest.mark.parametrize(("method", "path"), [("GET", "/v1/nothing"), ("DELETE", "/v1/jobs"),
                                              ("PUT", f"/v1/jobs/{JOB}"), ("GET", f"/v1/jobs/{JOB}/cancel")])
def test_unknown_routes_and_methods(client: Any, method: str, path: str) -> None:
    response = client.open(path, method=method, headers=ALICE)
    assert response.status_code in (404, 405)
    problem(response, response.status_code)
