"""Questions addressed to people other than the owner, over real HTTP with a real worker and Redis: who may answer
(by name, by role; never an unaddressed operator), what they see, deadlines, one-time links, who answered."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from tasks_backend.service.runtime import Runtime
from tests.adapters.a2a.test_a2a import rpc
from tests.adapters.mcp.clients.rpc import Legacy, Modern
from tests.adapters.ui.test_ui_sessions import sign_in
from tests.conftest import ALICE, BOB, CAROL, DAVE, OPER, wait_until

pytestmark = pytest.mark.usefixtures("worker")
APPROVE = {"approve": {"approved": True}}
ANSWERED_META = "io.tasks-backend/answeredBy"


def ask(http: httpx.Client, **params: Any) -> str:
    reply = http.post("/v1/jobs", json={"operation": "test.ask_routed", "params": params}, headers=ALICE)
    assert reply.status_code == 202, reply.text
    job_id = str(reply.json()["taskId"])
    wait_until(lambda: http.get(f"/v1/jobs/{job_id}", headers=ALICE).json()["status"] == "input_required")
    return job_id


def finished(http: httpx.Client, job_id: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        body: dict[str, Any] = http.get(f"/v1/jobs/{job_id}", headers=ALICE).json()
        return body if body["status"] in ("completed", "failed", "cancelled") else None

    return wait_until(done, 20, message=f"job {job_id} to finish")  # type: ignore[no-any-return]


def answer(http: httpx.Client, job_id: str, headers: dict[str, str], body: Any = None) -> httpx.Response:
    return http.post(f"/v1/jobs/{job_id}/input", json={"inputResponses": body or APPROVE}, headers=headers)


def asked_of(http: httpx.Client, headers: dict[str, str]) -> dict[str, dict[str, Any]]:
    reply = http.get("/v1/questions", headers=headers)
    assert reply.status_code == 200, reply.text
    return {q["jobId"]: q for q in reply.json()["questions"]}


def audit_of(http: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    reply = http.get("/v1/audit", params={"job": job_id}, headers=ALICE)
    assert reply.status_code == 200, reply.text
    return [e for e in reply.json()["entries"] if e["action"] == "job.answer"]


def test_a_question_to_bob_is_answered_by_bob_and_hidden_from_everyone_else(http: httpx.Client) -> None:
    job_id = ask(http, to=["principal:bob"])
    # Bob sees it among his questions, with who asked; carol does not.
    listed = asked_of(http, BOB)[job_id]
    assert listed["askedBy"] == "alice" and listed["key"] == "approve" and listed["operation"] == "test.ask_routed"
    assert listed["message"] == "Approve the refund?" and listed["requestedSchema"]["required"] == ["approved"]
    assert job_id not in asked_of(http, CAROL)
    # Bob sees the handle and his question, not the params; carol and an unaddressed operator get the plain 404.
    seen = http.get(f"/v1/jobs/{job_id}", headers=BOB)
    assert seen.status_code == 200 and "params" not in seen.json() and "approve" in seen.json()["inputRequests"]
    for stranger in (CAROL,):
        assert http.get(f"/v1/jobs/{job_id}", headers=stranger).status_code == 404
    for stranger in (CAROL, OPER):
        refused = answer(http, job_id, stranger)
        assert refused.status_code == 404 and refused.json()["type"].endswith("/not-found"), refused.text
    assert answer(http, job_id, BOB, {"approve": {"approved": "yes"}}).status_code == 422
    accepted = answer(http, job_id, BOB)
    assert accepted.status_code == 202, accepted.text
    done = finished(http, job_id)
    assert done["status"] == "completed" and done["result"] == {"approval": {"approved": True}}
    assert done["answeredBy"]["approve"]["by"] == "bob"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", done["answeredBy"]["approve"]["at"])
    # Bob's view after the end: still no result; the question is no longer listed; a late answer is a 409.
    after = http.get(f"/v1/jobs/{job_id}", headers=BOB).json()
    assert after["status"] == "completed" and "result" not in after and after["answeredBy"]["approve"]["by"] == "bob"
    assert job_id not in asked_of(http, BOB)
    assert answer(http, job_id, BOB).status_code == 409
    [entry] = audit_of(http, job_id)
    assert entry["principal"] == "bob" and entry["owner"] == "alice" and entry["detail"] == "approve:accept"
    assert entry["address"] == "127.0.0.1"


def test_a_role_addressed_question_reaches_its_members_and_the_owner_may_answer_too(http: httpx.Client) -> None:
    by_role = ask(http, to=["role:finance"])
    assert by_role in asked_of(http, DAVE) and by_role not in asked_of(http, BOB)
    assert answer(http, by_role, BOB).status_code == 404
    assert answer(http, by_role, DAVE).status_code == 202
    assert finished(http, by_role)["answeredBy"]["approve"]["by"] == "dave"
    by_owner = ask(http, to=["role:finance"])
    assert answer(http, by_owner, ALICE).status_code == 202
    assert finished(http, by_owner)["answeredBy"]["approve"]["by"] == "alice"
    assert [e["principal"] for e in audit_of(http, by_role)] == ["dave"]


def test_a_deadline_goes_on_with_the_default_answer(http: httpx.Client) -> None:
    job_id = ask(http, to=["principal:bob"], deadline_s=1.5, on_timeout={"approved": False})
    deadline = asked_of(http, BOB)[job_id]["deadline"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", deadline)
    done = finished(http, job_id)
    assert done["status"] == "completed" and done["result"] == {"approval": {"approved": False}}
    assert done["answeredBy"]["approve"]["by"] == "timeout"
    # The deadline's answer is on the audit trail as a person's would be, by "timeout".
    [entry] = audit_of(http, job_id)
    assert (entry["principal"], entry["owner"], entry["detail"]) == ("timeout", "alice", "approve:timeout"), entry
    late = answer(http, job_id, BOB)
    assert late.status_code == 409 and late.json()["type"].endswith("/not-waiting-for-input"), late.text


def test_a_deadline_with_fail_fails_the_job_saying_which_question(http: httpx.Client) -> None:
    job_id = ask(http, to=["principal:bob"], deadline_s=1.0, on_timeout="fail")
    done = finished(http, job_id)
    assert done["status"] == "failed", done
    assert re.fullmatch(r"question approve not answered by \d{4}-\d\d-\d\dT[\d:.]+Z", done["error"]["message"]), done
    assert answer(http, job_id, ALICE).status_code == 409


def test_an_answer_before_the_deadline_stands(http: httpx.Client) -> None:
    job_id = ask(http, to=["principal:bob"], deadline_s=2.0, on_timeout="fail")
    assert answer(http, job_id, BOB).status_code == 202
    done = finished(http, job_id)
    assert done["status"] == "completed" and done["answeredBy"]["approve"]["by"] == "bob"


def test_a_one_time_link_answers_once(http: httpx.Client) -> None:
    job_id = ask(http)
    assert http.post(f"/v1/jobs/{job_id}/questions/approve/link", headers=BOB).status_code == 404
    made = http.post(f"/v1/jobs/{job_id}/questions/approve/link", headers=ALICE)
    assert made.status_code == 201, made.text
    link = made.json()
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/ui/answer/[\w-]+", link["url"]) and link["expiresAt"]
    path = "/ui/answer/" + link["url"].rsplit("/", 1)[1]
    page = http.get(path)  # no token, no session
    assert page.status_code == 200 and "Approve the refund?" in page.text and 'name="approve.approved"' in page.text
    assert job_id not in page.text and "test.ask_routed" not in page.text  # nothing else of the job
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf
    used = http.post(path, data={"csrf": csrf[1], "approve.approved": "true"})
    assert used.status_code == 200, used.text
    done = finished(http, job_id)
    assert done["result"] == {"approval": {"approved": True}}
    assert done["answeredBy"]["approve"]["by"] == f"link:{link['linkId']}"
    again = http.post(path, data={"csrf": csrf[1], "approve.approved": "false"})
    assert again.status_code == 410 and "already been used" in again.text
    assert http.get(path).status_code == 410
    [entry] = audit_of(http, job_id)
    assert entry["principal"] == f"link:{link['linkId']}" and entry["address"] == "127.0.0.1"
    assert link["url"].rsplit("/", 1)[1] not in str(http.get("/v1/audit", params={"job": job_id}, headers=ALICE).json())


def test_a_revoked_link_is_refused(http: httpx.Client) -> None:
    job_id = ask(http)
    link = http.post(f"/v1/jobs/{job_id}/questions/approve/link", headers=ALICE).json()
    path = "/ui/answer/" + link["url"].rsplit("/", 1)[1]
    assert http.delete(f"/v1/jobs/{job_id}/questions/approve/link", headers=ALICE).status_code == 204
    page = http.get(path)
    assert page.status_code == 410 and "no longer works" in page.text
    csrf = re.search(r'name="csrf" value="([^"]+)"', http.get("/ui/signin").text)
    assert csrf
    refused = http.post(path, data={"csrf": csrf[1], "approve.approved": "true"})
    assert refused.status_code == 410 and "no longer works" in refused.text
    assert http.get(f"/v1/jobs/{job_id}", headers=ALICE).json()["status"] == "input_required"
    assert http.get("/ui/answer/not-a-real-token").status_code == 410


def test_waiting_for_me_lists_a_question_asked_of_me_and_answers_it(http: httpx.Client, live_url: str) -> None:
    job_id = ask(http, to=["principal:bob"])
    with httpx.Client(base_url=live_url, timeout=10) as page:
        assert sign_in(page, "bob-token").status_code == 303
        listed = page.get("/ui/waiting").text
        assert f'data-job="{job_id}"' in listed and "Asked by <strong>alice</strong>" in listed
        assert "Approve the refund?" in listed
        assert page.get(f"/ui/jobs/{job_id}").status_code == 404  # the question, never the job's page
        csrf = re.search(r'name="csrf" value="([^"]+)"', listed)
        assert csrf
        sent = page.post(f"/ui/jobs/{job_id}/input", data={"csrf": csrf[1], "from": "waiting", "_action": "accept",
                                                          "approve.approved": "true"})
        assert sent.status_code == 303, sent.text
    assert finished(http, job_id)["answeredBy"]["approve"]["by"] == "bob"
    with httpx.Client(base_url=live_url, timeout=10) as owner_page:
        assert sign_in(owner_page, "alice-token").status_code == 303
        shown = owner_page.get(f"/ui/jobs/{job_id}").text
    assert re.search(r"<code>approve</code> answered by <strong>bob</strong> <span class=\"hint\">from 127\.0\.0\.1",
                     shown), shown


def test_a_deadline_fires_once_however_many_wakers_see_it(http: httpx.Client, runtime: Runtime) -> None:
    job_id = ask(http, to=["principal:bob"], deadline_s=60, on_timeout={"approved": False})
    record = runtime.store.get(job_id)
    assert record is not None and record.input_requests
    due = int(record.input_requests["approve"]["params"]["_meta"]["io.tasks-backend/question"]["deadlineMs"])
    waker = runtime.waker()
    assert waker.time_out_questions(job_id, due - 1) == due  # not yet: look again at the deadline
    assert http.get(f"/v1/jobs/{job_id}", headers=ALICE).json()["status"] == "input_required"
    # Two wakers at once past the deadline: one answer is recorded, the job goes on once.
    assert waker.time_out_questions(job_id, due + 1) is None
    assert waker.time_out_questions(job_id, due + 1) is None
    done = finished(http, job_id)
    assert done["status"] == "completed" and done["result"] == {"approval": {"approved": False}}
    assert len(audit_of(http, job_id)) == 1
    assert answer(http, job_id, BOB).status_code == 409


def test_every_protocol_shows_who_answered(http: httpx.Client) -> None:
    """HTTP `answeredBy`; MCP (both revisions) the task's `_meta["io.tasks-backend/answeredBy"]`; A2A its metadata."""
    job_id = ask(http, to=["principal:bob"])
    # Bob answers over MCP (2026): the same check as over HTTP.
    Modern(http, "bob-token").result("tasks/update", {"taskId": job_id, "inputResponses": APPROVE})
    finished(http, job_id)
    by = {"by": "bob", "at": http.get(f"/v1/jobs/{job_id}", headers=ALICE).json()["answeredBy"]["approve"]["at"]}
    modern = Modern(http, "alice-token").result("tasks/get", {"taskId": job_id})
    assert modern["_meta"][ANSWERED_META] == {"approve": by} and "answeredBy" not in modern
    legacy = Legacy(http, "alice-token")
    legacy.initialize()
    assert legacy.result("tasks/get", {"taskId": job_id})["_meta"][ANSWERED_META] == {"approve": by}
    assert rpc(http, "GetTask", {"id": job_id}).json()["result"]["metadata"]["answeredBy"] == {"approve": by}
    [entry] = audit_of(http, job_id)
    assert entry["principal"] == "bob"


def test_a_rerun_of_a_timed_out_job_asks_again_with_a_deadline_of_its_own(http: httpx.Client) -> None:
    job_id = ask(http, to=["principal:bob"], deadline_s=1.0, on_timeout="fail")
    assert finished(http, job_id)["status"] == "failed"
    rerun = http.post(f"/v1/jobs/{job_id}/rerun", json={"keepSteps": True}, headers=ALICE)
    assert rerun.status_code == 202, rerun.text
    again = rerun.json()["taskId"]
    wait_until(lambda: http.get(f"/v1/jobs/{again}", headers=ALICE).json()["status"] == "input_required")
    assert answer(http, again, BOB).status_code == 202
    assert finished(http, again)["status"] == "completed"


def test_an_addressee_polls_like_the_owner_and_a_stranger_reads_a_missing_job(http: httpx.Client) -> None:
    """Bob's view is a handle like any other (it carries `Retry-After` while the job waits); carol's read and answer
    are exactly those of a job that does not exist."""
    job_id = ask(http, to=["principal:bob"])
    seen = http.get(f"/v1/jobs/{job_id}", headers=BOB)
    assert seen.status_code == 200 and seen.headers["Retry-After"] == "1", seen.headers
    assert seen.json()["owner"] == "alice" and set(seen.json()["inputRequests"]) == {"approve"}
    assert not {"params", "result", "error"} & set(seen.json())
    missing = "8c1e7d0e-52a5-4a8e-a6f1-2b0d0a6c4b11"
    for call in (lambda i: http.get(f"/v1/jobs/{i}", headers=CAROL), lambda i: answer(http, i, CAROL)):
        asked, unknown = call(job_id), call(missing)
        assert asked.status_code == unknown.status_code == 404 and asked.json() == unknown.json(), asked.text
        assert asked.json()["type"].endswith("/not-found")
    accepted = answer(http, job_id, BOB)
    assert accepted.status_code == 202 and "params" not in accepted.json() and accepted.json()["owner"] == "alice"
    assert finished(http, job_id)["result"] == {"approval": {"approved": True}}


def test_the_one_asked_follows_the_job_s_events_as_far_as_the_question_needs(http: httpx.Client,
                                                                           live_url: str) -> None:
    """`GET /v1/jobs/{id}/events` follows the same read rule as `GET /v1/jobs/{id}`: bob's stream shows his question
    and how the job ended, never its params or result; carol's is the plain 404."""
    job_id = ask(http, to=["principal:bob"])
    assert http.get(f"/v1/jobs/{job_id}/events", headers=CAROL).status_code == 404
    seen: list[dict[str, Any]] = []
    with httpx.Client(base_url=live_url, timeout=20) as follower, \
            follower.stream("GET", f"/v1/jobs/{job_id}/events", headers=BOB) as stream:
        assert stream.status_code == 200
        for line in stream.iter_lines():
            if not line.startswith("data: "):
                continue
            seen.append(json.loads(line[6:]))
            if len(seen) == 1:
                assert answer(http, job_id, BOB).status_code == 202
            if seen[-1]["status"] == "completed":
                break
    first, last = seen[0], seen[-1]
    assert first["status"] == "input_required" and list(first["inputRequests"]) == ["approve"], first
    assert last["status"] == "completed" and last["owner"] == "alice", last
    assert all("params" not in h and "result" not in h for h in seen), seen
