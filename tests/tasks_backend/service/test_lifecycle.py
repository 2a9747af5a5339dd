"""TTLs, key hygiene, cancellation before a worker sees the job, and the in-process Python API."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tasks_backend import Principal, SubmitOutcome
from tasks_backend.config import Settings
from tasks_backend.devtools.receivers import Receiver
from tasks_backend.errors import JobNotFound
from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import Runtime, build_runtime
from tests.adapters.ui.test_ui_sessions import sign_in
from tests.conftest import ALICE, BOB, Serve, wait_until
from tests.support.procs import worker_process
from tests.tasks_backend.remote.conftest import RemoteDeployment, remote_settings

pytestmark = pytest.mark.usefixtures("worker")


def job_keys(runtime: Runtime, job_id: str) -> list[str]:
    return [k for k in runtime.store.redis.scan_iter(match=f"{runtime.settings.key_prefix}:*{job_id}*")]


def state_of(runtime: Runtime, owner: str, job_id: str) -> JobState | None:
    try:
        return runtime.service.get(Principal(owner), job_id).state
    except JobNotFound:
        return None


def test_ttl_expiry_removes_every_key(runtime: Runtime) -> None:
    owner = f"ttl-{secrets.token_hex(3)}"
    record, _ = runtime.service.submit(owner, "test.noop", {}, idempotency_key="once", ttl_s=1.0)
    idem_key = runtime.store.keys.idempotency(owner, "once")
    wait_until(lambda: state_of(runtime, owner, record.id) is JobState.COMPLETED, message="completion")
    assert job_keys(runtime, record.id) and runtime.store.redis.exists(idem_key)
    wait_until(lambda: not job_keys(runtime, record.id) and not runtime.store.redis.exists(idem_key), 5,
               message="every key of the job to expire")
    with pytest.raises(JobNotFound):
        runtime.service.get(Principal(owner), record.id)
    records, _ = runtime.service.list(Principal(owner))
    assert records == []
    assert runtime.store.redis.zcard(runtime.store.keys.owner_index(owner)) == 0


def test_parked_job_expires_with_its_ttl(runtime: Runtime) -> None:
    owner = f"ttl-{secrets.token_hex(3)}"
    record, _ = runtime.service.submit(owner, "demo.refund", {"order_id": "x", "amount": 1}, ttl_s=1.5)
    wait_until(lambda: state_of(runtime, owner, record.id) is JobState.INPUT_REQUIRED, message="parking")
    wait_until(lambda: state_of(runtime, owner, record.id) is None and not job_keys(runtime, record.id), 5,
               message="the parked job to expire")


def test_running_job_past_its_ttl_stops_and_leaves_nothing(runtime: Runtime, tmp_path: Path) -> None:
    owner = f"ttl-{secrets.token_hex(3)}"
    ledger = tmp_path / "spin"
    record, _ = runtime.service.submit(owner, "test.spin", {"ledger": str(ledger)}, ttl_s=1.0)
    wait_until(ledger.exists, message="the job to start")
    wait_until(lambda: not job_keys(runtime, record.id), 5, message="expiry")
    # the worker's next check finds the job gone and stops without writing it back
    assert not job_keys(runtime, record.id)
    assert state_of(runtime, owner, record.id) is None


def test_cancel_while_queued_never_runs(settings: Settings, tmp_path: Path) -> None:
    """Submitted to a queue no worker serves, cancelled, then a worker starts: the job never runs."""
    # A broker in a database of its own: publishing cannot share the store's round trip.
    idle = settings.with_(queue=f"idle-{secrets.token_hex(3)}",
                          broker_url=settings.effective_broker_url.rsplit("/", 1)[0] + "/15")
    rt = build_runtime(idle)
    ledger = tmp_path / "never"
    record, _ = rt.service.submit("alice", "test.steps", {"ledger": str(ledger), "steps": 1})
    cancelled = rt.service.cancel(Principal("alice"), record.id)
    assert cancelled.state is JobState.CANCELLED
    broker = redis.Redis.from_url(idle.effective_broker_url)
    assert broker.llen(idle.queue) == 1
    worker = worker_process(idle, tmp_path / "worker.log")
    try:
        wait_until(lambda: broker.llen(idle.queue) == 0, 30, message="consumption")
        wait_until(lambda: "terminal" in worker.output(), 10, message="the worker to drop the job")
    finally:
        worker.stop()
    assert not ledger.exists()
    assert rt.service.get(Principal("alice"), record.id).state is JobState.CANCELLED


def test_python_api_shares_owners_and_idempotency_with_http(runtime: Runtime, client: Any) -> None:
    service = runtime.service
    record, outcome = service.submit("alice", "demo.sleep", {"seconds": 0}, idempotency_key="py-1")
    again, outcome2 = service.submit(Principal("alice"), "demo.sleep", {"seconds": 0}, idempotency_key="py-1")
    assert (outcome, outcome2) == (SubmitOutcome.CREATED, SubmitOutcome.EXISTING) and again.id == record.id
    over_http = client.post("/v1/jobs", json={"operation": "demo.sleep", "params": {"seconds": 0}},
                            headers={**ALICE, "Idempotency-Key": "py-1"})
    assert over_http.get_json()["taskId"] == record.id
    wait_until(lambda: service.get(Principal("alice"), record.id).state is JobState.COMPLETED,
               message="completion")
    assert client.get(f"/v1/jobs/{record.id}", headers=ALICE).get_json()["result"] == {"slept": 0.0}
    with pytest.raises(JobNotFound):
        service.get(Principal("bob"), record.id)


def test_every_key_the_product_writes_has_a_ttl(runtime: Runtime, client: Any, tmp_path: Path) -> None:
    """Exercise every kind of write, then check every key under the prefix (other tests' too)."""
    svc, alice = runtime.service, Principal("alice")
    done, _ = svc.submit(alice, "test.noop", {}, idempotency_key=f"leak-{secrets.token_hex(3)}")
    failed, _ = svc.submit(alice, "demo.fail", {})
    parked, _ = svc.submit(alice, "test.ask_twice", {"ledger": str(tmp_path / "a")})
    spin, _ = svc.submit(alice, "test.spin", {"ledger": str(tmp_path / "s")})
    wait_until(lambda: svc.get(alice, parked.id).state is JobState.INPUT_REQUIRED, message="parking")
    svc.provide_input(alice, parked.id, {"first": {"v": 1}})
    wait_until(lambda: svc.get(alice, parked.id).state is JobState.INPUT_REQUIRED
               and "second" in (svc.get(alice, parked.id).input_requests or {}), message="second question")
    wait_until((tmp_path / "s").exists, message="spin start")
    svc.cancel(alice, spin.id)
    for job in (done, failed, spin):
        wait_until(lambda job=job: svc.get(alice, job.id).terminal, message="terminal")
    svc.list(alice)
    runtime.sweeper().sweep_once()
    schedules, name = runtime.schedules(), f"leak-{secrets.token_hex(3)}"
    for each in (name, f"{name}-gone"):
        schedules.define(alice, {"name": each, "operation": "test.noop", "everySeconds": 1})
    ticker = schedules.ticker()
    wait_until(lambda: ticker.tick_once() and schedules.jobs_of(alice, name)[0], message="a tick's job")
    schedules.pause(alice, name)
    schedules.delete(alice, f"{name}-gone")
    assert keys_without_ttl(runtime) == []


def keys_without_ttl(runtime: Runtime) -> list[str]:
    """The keys under the runtime's prefix that exist and have no TTL (there are more than a few keys at all)."""
    keys = list(runtime.store.redis.scan_iter(match=f"{runtime.settings.key_prefix}:*", count=1000))
    assert len(keys) > 10
    return sorted(k for k in keys if runtime.store.redis.pttl(k) < 0 and runtime.store.redis.exists(k))


def test_every_key_of_operations_questions_timing_webhooks_and_remotes_has_a_ttl(
        redis_base: str, tmp_path: Path, serve: Serve) -> None:
    """Worker and sweeper processes of the test's own, everything over real HTTP: remote tasks against this
    deployment itself, delayed, prioritised and concurrency-limited jobs, a webhook and its owner's secret, routed
    questions with deadlines, one-time links (used, revoked), reruns keeping steps, bulk actions, schedules, a
    sign-in and the audit trail; then every key under the deployment's prefix has a TTL."""
    d = RemoteDeployment(remote_settings(redis_base), tmp_path, serve)
    failed = True
    try:
        exercise(d, tmp_path)
        failed = False
    finally:
        d.close(show_logs=failed)
    assert keys_without_ttl(d.runtime) == []


def exercise(d: RemoteDeployment, tmp: Path) -> None:
    d.worker("w", concurrency=4)
    d.sweeper()
    http, receiver = d.http, Receiver()
    jobs = [d.submit("test.remote_tool", {"url": d.url + "/mcp", "tool": "demo.sleep",
                                          "arguments": {"seconds": 2, "steps": 2}}),
            d.submit("test.remote_message", {"url": d.url + "/a2a", "message": {
                "operation": "demo.sleep", "params": {"seconds": 2, "steps": 2}}})]
    later, hold = (datetime.now(UTC) + timedelta(minutes=5)).isoformat(), tmp / "hold"
    for body in ({"operation": "test.noop", "params": {}, "delayMs": 300, "priority": 5},
                 {"operation": "test.noop", "params": {}, "runAt": later},
                 *({"operation": "test.limited", "params": {"ledger": str(tmp / "limited"), "customer_id": "c1",
                                                            "hold": str(hold)}} for _ in range(3))):
        reply = http.post("/v1/jobs", json=body)
        assert reply.status_code == 202, reply.text
        jobs.append(reply.json()["taskId"])
    assert http.get("/v1/webhook-secret").status_code == 200
    assert http.post("/v1/webhook-secret", json={"graceSeconds": 60}).status_code == 200
    hooked = http.post("/v1/jobs", json={"operation": "test.noop", "params": {}, "webhook": {"url": receiver.url}})
    assert hooked.status_code == 202, hooked.text
    jobs.append(hooked.json()["taskId"])

    # Questions: to bob and the finance role, answered through a one-time link; another whose deadline passes;
    # a third whose link is revoked before its job is cancelled.
    linked = d.submit("test.ask_routed", {"to": ["principal:bob", "role:finance"], "deadline_s": 60})
    timed_out = d.submit("test.ask_routed", {"to": ["principal:bob"], "deadline_s": 0.5,
                                             "on_timeout": {"approved": False}})
    revoked = d.submit("test.ask_routed", {"to": ["role:finance"], "deadline_s": 60})
    for job_id in (linked, revoked):
        wait_until(lambda job_id=job_id: d.state(job_id) is JobState.INPUT_REQUIRED, 20, message="a question")
    assert {q["jobId"] for q in http.get("/v1/questions", headers=BOB).json()["questions"]} >= {linked}
    # While remote tasks, questions, links, held and delayed jobs wait, their keys have TTLs too.
    wait_until(lambda: all(d.state(j) is JobState.SUSPENDED for j in jobs[:2]), 20, message="the remote jobs to park")
    assert http.post(f"/v1/jobs/{revoked}/questions/approve/link").status_code == 201
    assert d.state(jobs[3]) is JobState.QUEUED  # its runAt is minutes ahead
    assert keys_without_ttl(d.runtime) == []
    assert http.post(f"/v1/jobs/{jobs[3]}/cancel").status_code == 202  # a delayed job leaves when cancelled
    hold.touch()
    link = http.post(f"/v1/jobs/{linked}/questions/approve/link").json()
    path = "/ui/answer/" + link["url"].rsplit("/", 1)[1]
    csrf = re.search(r'name="csrf" value="([^"]+)"', http.get(path).text)
    assert csrf and http.post(path, data={"csrf": csrf[1], "approve.approved": "true"}).status_code == 200
    assert http.delete(f"/v1/jobs/{revoked}/questions/approve/link").status_code == 204
    assert http.post(f"/v1/jobs/{revoked}/cancel").status_code == 202
    jobs += [linked, timed_out, revoked]

    # Failures, a rerun keeping steps, bulk reruns and a bulk cancel.
    switch = tmp / "switch"
    failing = [d.submit("test.fails_until", {"ledger": str(tmp / "ledger"), "switch": str(switch), "key": i})
               for i in range(3)]
    for job_id in failing:
        assert d.finished(job_id)["status"] == "failed"
    switch.touch()
    rerun = http.post(f"/v1/jobs/{failing[0]}/rerun", json={"keepSteps": True}, headers={"Idempotency-Key": "r1"})
    assert rerun.status_code == 202, rerun.text
    spinning = d.submit("test.spin", {"ledger": str(tmp / "spin")})
    wait_until((tmp / "spin").exists, 20, message="the spinning job to start")
    bulks = []
    for body in ({"action": "rerun", "filter": {"status": "failed", "operation": "test.fails_until"}},
                 {"action": "cancel", "filter": {"status": "working", "operation": "test.spin"}, "dryRun": True},
                 {"action": "cancel", "filter": {"status": "working", "operation": "test.spin"}}):
        reply = http.post("/v1/jobs/bulk", json=body, headers={"Idempotency-Key": f"bulk-{len(bulks)}"})
        assert reply.status_code == 202, reply.text
        bulks.append(reply.json()["taskId"])
    jobs += [*failing, rerun.json()["taskId"], spinning, *bulks]

    # Schedules: one ticks, is paused; another is deleted.
    for name in ("tick", "gone"):
        made = http.post("/v1/schedules", json={"name": name, "operation": "test.noop", "params": {},
                                                "everySeconds": 1})
        assert made.status_code == 201, made.text
    wait_until(lambda: http.get("/v1/jobs", params={"schedule": "tick"}).json()["jobs"], 20,
               message="a tick's job")
    assert http.post("/v1/schedules/tick/pause").status_code == 200
    assert http.delete("/v1/schedules/gone").status_code == 204
    with httpx.Client(base_url=d.url, timeout=10) as page:
        assert sign_in(page, "alice-token").status_code == 303

    for job_id in jobs:
        assert d.finished(job_id, 60)["status"] in ("completed", "failed", "cancelled")
    assert d.job(timed_out)["result"] == {"approval": {"approved": False}}
    assert d.finished(bulks[0])["result"]["done"] == 3
    wait_until(lambda: receiver.calls, 20, message="the webhook delivery")
    audited = {e["action"] for e in http.get("/v1/audit", params={"limit": 200}).json()["entries"]}
    assert {"job.cancel", "job.answer", "job.rerun", "jobs.bulk", "schedule.create", "schedule.pause",
            "schedule.delete", "ui.sign_in"} <= audited, audited
    assert http.get("/v1/audit", params={"job": failing[0]}).json()["entries"]
    receiver.close()


def test_quick_submissions_list_newest_first_across_pages(runtime: Runtime) -> None:
    """Many submissions within one millisecond still list in the order they were made."""
    owner = Principal(f"burst-{secrets.token_hex(3)}")
    ids = [runtime.service.submit(owner, "test.noop", {})[0].id for _ in range(40)]
    seen: list[str] = []
    cursor = None
    while True:
        page, cursor = runtime.service.list(owner, limit=7, cursor=cursor)
        seen += [r.id for r in page]
        if cursor is None:
            break
    assert seen == list(reversed(ids))


def test_the_last_full_page_has_no_cursor_and_counts_match_the_listing(runtime: Runtime) -> None:
    """A cursor only when another job follows; `count` agrees with what listing finds, filtered or not."""
    owner = Principal(f"pages-{secrets.token_hex(3)}")
    ids = [runtime.service.submit(owner, "test.noop", {})[0].id for _ in range(6)]
    first, cursor = runtime.service.list(owner, limit=3)
    assert [r.id for r in first] == ids[::-1][:3] and cursor is not None
    last, cursor = runtime.service.list(owner, limit=3, cursor=cursor)
    assert [r.id for r in last] == ids[::-1][3:] and cursor is None
    assert runtime.service.list(owner, limit=6)[1] is None
    assert runtime.service.count(owner) == 6

    def odd(records: list[Any]) -> list[Any]:
        return [r for r in records if ids.index(r.id) % 2]

    page, cursor = runtime.service.list(owner, limit=2, where=odd)
    assert [r.id for r in page] == [ids[5], ids[3]] and cursor is not None
    page, cursor = runtime.service.list(owner, limit=2, cursor=cursor, where=odd)
    assert [r.id for r in page] == [ids[1]] and cursor is None
    assert runtime.service.count(owner, where=odd) == 3
