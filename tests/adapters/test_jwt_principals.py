"""Principals from JWTs over real HTTP: a namespace of their own beside static and file tokens, no admin right from a
`sub` alone, a small clock leeway, and a clear 401 for a subject no principal can be named by."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import jwt
import pytest
from werkzeug.serving import make_server

from adapters.app import create_app
from tasks_backend.service.runtime import build_runtime
from tests.conftest import ALICE, bearer, make_settings

SECRET = "j" * 32


def token(sub: str, **claims: Any) -> str:
    now = int(time.time())
    return jwt.encode({"sub": sub, "exp": now + 300, **claims}, SECRET, algorithm="HS256")


@pytest.fixture(scope="module")
def url(redis_base: str) -> Iterator[str]:
    """A server taking JWTs beside the static tokens (alice, bob, ops; ops is an admin, as is the JWT subject
    `auditor`, named in its namespace)."""
    settings = make_settings(redis_base, jwt_secret=SECRET, admins=("ops", "jwt:auditor"))
    server = make_server("127.0.0.1", 0, create_app(runtime=build_runtime(settings)), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


@pytest.fixture
def http(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=10) as client:
        yield client


def submit(http: httpx.Client, headers: dict[str, str]) -> str:
    reply = http.post("/v1/jobs", json={"operation": "test.noop", "params": {}}, headers=headers)
    assert reply.status_code == 202, reply.text
    job_id: str = reply.json()["taskId"]
    return job_id


def listed(http: httpx.Client, headers: dict[str, str]) -> set[str]:
    reply = http.get("/v1/jobs", params={"limit": 200}, headers=headers)
    assert reply.status_code == 200, reply.text
    return {job["taskId"] for job in reply.json()["jobs"]}


def test_a_jwt_subject_naming_a_static_principal_is_not_that_principal(http: httpx.Client) -> None:
    static_job = submit(http, ALICE)
    as_sub = bearer(token("alice"))
    assert http.get(f"/v1/jobs/{static_job}", headers=as_sub).status_code == 404
    assert http.post(f"/v1/jobs/{static_job}/cancel", headers=as_sub).status_code == 404
    assert static_job not in listed(http, as_sub)
    # The subject has jobs of its own, which the static principal in turn does not see; the static
    # principal keeps its own jobs as before.
    jwt_job = submit(http, as_sub)
    assert listed(http, as_sub) >= {jwt_job} and jwt_job not in listed(http, ALICE)
    assert http.get(f"/v1/jobs/{jwt_job}", headers=ALICE).status_code == 404
    assert http.get(f"/v1/jobs/{static_job}", headers=ALICE).status_code == 200


def test_no_admin_right_follows_from_a_sub_alone(http: httpx.Client) -> None:
    job = submit(http, ALICE)
    assert http.get(f"/v1/jobs/{job}", headers=bearer("ops-token")).status_code == 200  # the static admin
    assert http.get(f"/v1/jobs/{job}", headers=bearer(token("ops"))).status_code == 404
    # Only an admin entry written in the JWT namespace makes a subject an admin.
    assert http.get(f"/v1/jobs/{job}", headers=bearer(token("auditor"))).status_code == 200


def test_exp_and_nbf_get_a_small_clock_leeway(http: httpx.Client) -> None:
    now = int(time.time())
    # An issuer whose clock runs a few seconds ahead of ours, or a token that expired a moment ago.
    assert http.get("/v1/jobs", headers=bearer(token("skewed", nbf=now + 10, iat=now + 10))).status_code == 200
    assert http.get("/v1/jobs", headers=bearer(token("late", exp=now - 10))).status_code == 200
    for stale in (token("late", exp=now - 120), token("early", nbf=now + 120)):
        assert http.get("/v1/jobs", headers=bearer(stale)).status_code == 401


@pytest.mark.parametrize("sub", ["\ud800", "ok\udfffthen", "a\x00b", "line\nbreak", "x" * 256],
                         ids=["lone-surrogate", "inner-surrogate", "nul", "newline", "too-long"])
def test_a_signed_sub_no_principal_can_be_named_by_is_a_clear_401(http: httpx.Client, sub: str) -> None:
    signed = bearer(token(sub))
    reply = http.get("/v1/jobs", headers=signed)
    assert reply.status_code == 401 and reply.headers["content-type"] == "application/problem+json"
    reply = http.post("/v1/jobs", json={"operation": "test.noop", "params": {}}, headers=signed)
    assert reply.status_code == 401
    reply = http.post("/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}},
                      headers={**signed, "A2A-Version": "1.0"})
    assert reply.status_code == 401 and reply.json()["error"]["code"] < 0
    # The page's sign-in form says it did not take the token, as for any other.
    form = http.get("/ui/signin").text
    csrf = form.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    reply = http.post("/ui/signin", data={"token": signed["Authorization"][7:], "csrf": csrf})
    assert reply.status_code == 401 and "That token was not accepted." in reply.text
