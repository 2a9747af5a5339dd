"""Every answer spells its status line the standard way, whichever part of the app wrote it."""

from __future__ import annotations

import httpx

from tests.conftest import Users, bearer


def test_submit_cancel_and_input_answer_202_accepted(http: httpx.Client, users: Users, worker: object) -> None:
    _, token = users.new()
    auth = bearer(token)
    submitted = http.post("/v1/jobs", json={"operation": "demo.sleep", "params": {"seconds": 30}}, headers=auth)
    assert (submitted.status_code, submitted.reason_phrase) == (202, "Accepted")
    cancelled = http.post(f"/v1/jobs/{submitted.json()['taskId']}/cancel", headers=auth)
    assert (cancelled.status_code, cancelled.reason_phrase) == (202, "Accepted")
    again = http.post(f"/v1/jobs/{submitted.json()['taskId']}/cancel", headers=auth)
    assert (again.status_code, again.reason_phrase) == (409, "Conflict")
    missing = http.get("/v1/jobs/no-such-job", headers=auth)
    assert (missing.status_code, missing.reason_phrase) == (404, "Not Found")
