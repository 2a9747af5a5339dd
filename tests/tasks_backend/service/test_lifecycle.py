"""TTLs, key hygiene, cancellation before a worker sees the job, and the in-process Python API."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
import redis

from tasks_backend import Principal, SubmitOutcome
from tasks_backend.config import Settings
from tasks_backend.errors import JobNotFound
from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import Runtime, build_runtime
from tests.conftest import ALICE, wait_until
from tests.support.procs import worker_process

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
    keys = list(runtime.store.redis.scan_iter(match=f"{runtime.settings.key_prefix}:*", count=1000))
    assert len(keys) > 10
    no_ttl = [k for k in keys if runtime.store.redis.pttl(k) < 0 and runtime.store.redis.exists(k)]
    assert no_ttl == []


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
