"""The audit trail over real HTTP, a real Redis and a real worker: each action leaves an entry (who, from where,
what, on which job, when, in which request), whichever protocol it came by; who reads which entries."""

from __future__ import annotations

import logging
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tasks_backend.service.runtime import build_runtime
from tests.adapters.a2a.test_a2a import rpc
from tests.adapters.mcp.clients.rpc import Modern
from tests.adapters.ui.test_ui_sessions import sign_in
from tests.conftest import OPS, Serve, Users, bearer, make_settings, wait_until

pytestmark = pytest.mark.usefixtures("worker")

REFUND = {"operation": "demo.refund", "params": {"order_id": "o-1", "amount": 12.5}}


def submit(http: httpx.Client, headers: dict[str, str], body: dict[str, Any] = REFUND) -> str:
    reply = http.post("/v1/jobs", json=body, headers=headers)
    assert reply.status_code == 202, reply.text
    job_id: str = reply.json()["taskId"]
    return job_id


def waiting(http: httpx.Client, headers: dict[str, str], job_id: str) -> None:
    wait_until(lambda: http.get(f"/v1/jobs/{job_id}", headers=headers).json()["status"] == "input_required")


def audit(http: httpx.Client, headers: dict[str, str], **query: Any) -> list[dict[str, Any]]:
    reply = http.get("/v1/audit", params=query, headers=headers)
    assert reply.status_code == 200, reply.text
    entries: list[dict[str, Any]] = reply.json()["entries"]
    return entries


def test_cancel_and_answers_over_http_a2a_and_mcp_are_recorded_alike(http: httpx.Client, users: Users) -> None:
    name, token = users.new("audited")
    me = bearer(token)
    by_http, by_a2a, by_mcp, cancelled = (submit(http, me) for _ in range(4))
    for job_id in (by_http, by_a2a, by_mcp, cancelled):
        waiting(http, me, job_id)

    answered = http.post(f"/v1/jobs/{by_http}/input", json={"inputResponses": {"approval": {"approved": True}}},
                         headers={**me, "X-Request-Id": "answer-by-http"})
    assert answered.status_code == 202, answered.text
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "taskId": by_a2a,
               "parts": [{"data": {"inputResponses": {"approval": {"approved": False}}}}]}
    over_a2a = http.post("/a2a", headers={**me, "A2A-Version": "1.0", "X-Request-Id": "answer-by-a2a"},
                         json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}})
    assert "result" in over_a2a.json(), over_a2a.text
    Modern(http, token).result("tasks/update", {"taskId": by_mcp, "inputResponses": {"approval": {
        "action": "decline"}}}, headers={"X-Request-Id": "answer-by-mcp"})
    assert http.post(f"/v1/jobs/{cancelled}/cancel", headers={**me, "X-Request-Id": "the-cancel"}).status_code == 202

    for job_id, action, request_id in ((by_http, "job.answer", "answer-by-http"),
                                       (by_a2a, "job.answer", "answer-by-a2a"),
                                       (by_mcp, "job.answer", "answer-by-mcp"),
                                       (cancelled, "job.cancel", "the-cancel")):
        [entry] = audit(http, me, job=job_id)
        assert entry.pop("id") and re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", entry.pop("at"))
        expected = {"principal": name, "action": action, "jobId": job_id, "owner": name, "address": "127.0.0.1",
                    "requestId": request_id}
        detail = {by_http: "approval:accept", by_a2a: "approval:accept", by_mcp: "approval:decline"}.get(job_id)
        assert entry == expected | ({"detail": detail} if detail else {})
    # What was answered is not kept: the key and that it was accepted, never the value.
    assert all("approved" not in str(e) and "False" not in str(e) for e in audit(http, me))
    assert [e["jobId"] for e in audit(http, me)] == [cancelled, by_mcp, by_a2a, by_http]  # newest first


def test_schedule_and_push_config_changes_and_a_web_sign_in_are_recorded(http: httpx.Client,
                                                                          users: Users, live_url: str) -> None:
    name, token = users.new("changer")
    me = bearer(token)
    body = {"name": "nightly", "operation": "test.noop", "params": {}, "everySeconds": 3600}
    assert http.post("/v1/schedules", json=body, headers=me).status_code == 201
    assert http.post("/v1/schedules", json=body, headers=me).status_code == 200  # unchanged: nothing to record
    assert http.post("/v1/schedules/nightly/pause", headers=me).status_code == 200
    assert http.post("/v1/schedules/nightly/resume", headers=me).status_code == 200
    assert http.delete("/v1/schedules/nightly", headers=me).status_code == 204
    job_id = submit(http, me)
    made = rpc(http, "CreateTaskPushNotificationConfig", {"taskId": job_id, "id": "hook", "url": "https://8.8.8.8/h",
                                                          "token": "hook-secret"}, token=token)
    assert "result" in made.json(), made.text
    gone = rpc(http, "DeleteTaskPushNotificationConfig", {"taskId": job_id, "id": "hook"}, token=token)
    assert "result" in gone.json(), gone.text
    with httpx.Client(base_url=live_url, timeout=10) as page:
        assert sign_in(page, token).status_code == 303

    entries = audit(http, me)
    assert [(e["action"], e.get("target"), e.get("jobId")) for e in reversed(entries)] == [
        ("schedule.create", "nightly", None), ("schedule.pause", "nightly", None),
        ("schedule.resume", "nightly", None), ("schedule.delete", "nightly", None),
        ("push_config.set", "hook", job_id), ("push_config.delete", "hook", job_id), ("ui.sign_in", None, None)]
    assert {(e["principal"], e["owner"], e["address"]) for e in entries} == {(name, name, "127.0.0.1")}
    assert "hook-secret" not in str(entries)
    assert [e["id"] for e in audit(http, OPS, principal=name)] == [e["id"] for e in entries]


def test_owners_see_their_own_admins_and_operators_all(http: httpx.Client, users: Users, serve: Serve,
                                                       redis_base: str) -> None:
    alice_name, alice_token = users.new("alice")
    _, carol_token = users.new("carol")
    alice, carol = bearer(alice_token), bearer(carol_token)
    jobs = [submit(http, alice) for _ in range(3)]
    for job_id in jobs:
        assert http.post(f"/v1/jobs/{job_id}/cancel", headers=alice).status_code == 202
    mine = audit(http, alice)
    assert [e["jobId"] for e in mine] == jobs[::-1]
    assert audit(http, carol) == [] and audit(http, carol, job=jobs[0]) == []
    assert audit(http, carol, principal=alice_name) == []
    # The admin reads everyone's; filtered by principal, by job, and by time.
    assert [e["jobId"] for e in audit(http, OPS, principal=alice_name)] == jobs[::-1]
    assert [e["jobId"] for e in audit(http, OPS, job=jobs[1])] == [jobs[1]]
    assert audit(http, OPS, principal=alice_name, since=mine[0]["at"])[-1]["id"] == mine[0]["id"]
    assert len(audit(http, OPS, principal=alice_name, since="1h")) == 3
    assert audit(http, OPS, principal=alice_name, since="2100-01-01T00:00:00Z") == []
    # Pages, by cursor.
    first = http.get("/v1/audit", params={"principal": alice_name, "limit": 2}, headers=alice).json()
    rest = http.get("/v1/audit", params={"principal": alice_name, "limit": 2, "cursor": first["nextCursor"]},
                    headers=alice).json()
    assert [e["jobId"] for e in first["entries"] + rest["entries"]] == jobs[::-1] and rest["nextCursor"] is None
    # An operator (TASKS_BACKEND_OPERATORS) reads everyone's too, on a server whose settings name one.
    with httpx.Client(base_url=serve(make_settings(redis_base, operators=("bob",))), timeout=10) as other:
        job_id = submit(other, bearer("alice-token"))
        assert other.post(f"/v1/jobs/{job_id}/cancel", headers=bearer("alice-token")).status_code == 202
        assert [e["jobId"] for e in audit(other, bearer("bob-token"))] == [job_id]


@pytest.mark.parametrize(("query", "field"), [({"jobs": "x"}, "jobs"), ({"since": "yesterday"}, "since"),
                                              ({"limit": "0"}, "limit"), ({"cursor": "bm9wZQ"}, "cursor")])
def test_bad_queries_are_400s_naming_the_field(http: httpx.Client, query: dict[str, str], field: str) -> None:
    reply = http.get("/v1/audit", params=query, headers=OPS)
    assert reply.status_code == 400 and reply.headers["Content-Type"] == "application/problem+json"
    assert field in reply.json()["detail"] or field in str(reply.json().get("errors")), reply.text


def test_the_job_page_shows_who_answered_and_who_cancelled(http: httpx.Client, users: Users, live_url: str,
                                                           tmp_path: Path) -> None:
    name, token = users.new("pager")
    me = bearer(token)
    job_id = submit(http, me, {"operation": "test.ask_twice", "params": {"ledger": str(tmp_path / "ledger")}})
    waiting(http, me, job_id)
    assert http.post(f"/v1/jobs/{job_id}/input", json={"inputResponses": {"first": {"v": 7}}},
                     headers=me).status_code == 202
    wait_until(lambda: "second" in (http.get(f"/v1/jobs/{job_id}", headers=me).json().get("inputRequests") or {}))
    with httpx.Client(base_url=live_url, timeout=10) as page:
        assert sign_in(page, token).status_code == 303
        before = page.get(f"/ui/jobs/{job_id}").text
        assert "Who acted" in before and "Cancelled by" not in before
        csrf = re.search(r'name="csrf" value="([^"]+)"', before)
        assert csrf
        assert page.post(f"/ui/jobs/{job_id}/cancel", data={"csrf": csrf[1]}).status_code == 200
        shown = page.get(f"/ui/jobs/{job_id}").text
    answered = re.search(rf"Answered by <strong>{name}</strong> <span class=\"hint\">\(first:accept\)</span>", shown)
    assert answered and re.search(rf"Cancelled by <strong>{name}</strong>", shown[answered.end():]), shown


def test_behind_a_trusted_proxy_the_forwarded_address_is_recorded(serve: Serve, redis_base: str) -> None:
    with httpx.Client(base_url=serve(make_settings(redis_base, trusted_proxies=1)), timeout=10) as proxied:
        alice = bearer("alice-token")
        job_id = submit(proxied, alice)
        forwarded = {**alice, "X-Forwarded-For": "198.51.100.9, 203.0.113.7"}  # the left one is the client's say
        assert proxied.post(f"/v1/jobs/{job_id}/cancel", headers=forwarded).status_code == 202
        assert [e["address"] for e in audit(proxied, alice, job=job_id)] == ["203.0.113.7"]


def _audit_failures(http: httpx.Client) -> float:
    found = re.search(r"^tasks_backend_audit_write_failures_total (\S+)$", http.get("/metrics", headers=OPS).text,
                      re.M)
    return float(found[1]) if found else 0.0


@pytest.mark.parametrize("broken", ["system", "job"])
def test_an_audit_write_that_fails_leaves_the_action_done_answered_logged_and_counted(
        serve: Serve, redis_base: str, broken: str, caplog: pytest.LogCaptureFixture) -> None:
    """An audit stream holding a value of the wrong type makes Redis refuse the entry after the cancel (or the
    rerun) took effect: the caller gets the action's own answer, the failure is logged (no token in it) and
    counted in /metrics, and the streams that can take the entry still get it."""
    settings = make_settings(redis_base)  # no worker serves its queue: the job stays queued until cancelled
    store = build_runtime(settings).store
    alice = bearer("alice-token")
    with httpx.Client(base_url=serve(settings), timeout=10) as http:
        job_id = submit(http, alice)
        key = store.keys.audit() if broken == "system" else store.keys.audit_job(job_id)
        store.redis.set(key, "not a stream", px=600_000)
        before = _audit_failures(http)
        with caplog.at_level(logging.ERROR):
            cancelled = http.post(f"/v1/jobs/{job_id}/cancel", headers=alice)
            assert cancelled.status_code == 202, cancelled.text
            assert http.get(f"/v1/jobs/{job_id}", headers=alice).json()["status"] == "cancelled"
            rerun = http.post(f"/v1/jobs/{job_id}/rerun", headers={**alice, "Idempotency-Key": "once"})
            assert rerun.status_code == 202, rerun.text
            again = http.post(f"/v1/jobs/{job_id}/rerun", headers={**alice, "Idempotency-Key": "once"})
            assert again.status_code == 202 and again.json()["taskId"] == rerun.json()["taskId"]
        failures = [r for r in caplog.records if "audit entry not written" in r.getMessage()]
        assert {r.getMessage().split(":")[1].split()[0] for r in failures} >= {"job.cancel", "job.rerun"}
        assert "alice-token" not in caplog.text
        assert _audit_failures(http) >= before + 2
        # The streams that were not broken hold both entries all the same (the owner's, and the job's).
        assert [e["action"] for e in audit(http, alice) if e.get("jobId") == job_id] == ["job.rerun", "job.cancel"]
        if broken == "system":
            assert [e["action"] for e in audit(http, alice, job=job_id)] == ["job.rerun", "job.cancel"]
