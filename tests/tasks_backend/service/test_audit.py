"""The audit trail's bounds in a real Redis: entries past the retention go (by Redis's clock) and are never read
back, every stream expires, and the retention setting takes seconds or a duration."""

from __future__ import annotations

import pytest

from tasks_backend.access.auth import Principal
from tasks_backend.config import Settings
from tasks_backend.service import audit as audit_module
from tasks_backend.service.audit import Audit
from tasks_backend.service.runtime import build_runtime
from tests.conftest import make_settings, wait_until

ADMIN = Principal("root", admin=True)


def test_entries_older_than_the_retention_are_trimmed_and_never_read_back(redis_base: str) -> None:
    runtime = build_runtime(make_settings(redis_base))
    store, keys = runtime.store, runtime.store.keys
    kept = Audit(store, runtime.settings)  # 30 days
    job = "5f0c4a8e-0000-4000-8000-000000000001"
    for n in range(3):
        kept.record("alice", "job.cancel", job_id=job, owner="alice", detail=f"old {n}")
    old = kept.query(ADMIN)[0]
    assert len(old) == 3 and store.redis.xlen(keys.audit()) == 3
    # Redis's clock moves past the old entries: a recorder keeping 5 ms writes one and trims the rest.
    wait_until(lambda: kept.entries.now_ms() > old[0].at_ms + 5)
    short = Audit(store, runtime.settings.with_(audit_retention_s=0.005))
    short.record("bob", "schedule.pause", target="nightly", owner="bob")
    assert [e.principal for e in short.query(ADMIN)[0]] == ["bob"]
    assert store.redis.xlen(keys.audit()) == 1
    # The job's and alice's streams got no write since: what is past the retention is not read back from them.
    assert store.redis.xlen(keys.audit_job(job)) == 3
    assert short.query(ADMIN, job=job) == ([], None) and short.query("alice") == ([], None)
    assert kept.query("alice")[0] == old
    for key in (keys.audit_job(job), keys.audit_owner("alice")):
        assert 0 < store.redis.pttl(key) <= 30 * 86400 * 1000, key
    for key in (keys.audit(), keys.audit_owner("bob")):  # last written keeping 5 ms: gone, or going within 5 ms
        assert store.redis.pttl(key) in (-2, *range(6)), key


def test_one_query_scans_a_bounded_number_of_entries_and_says_where_to_go_on(
        redis_base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit_module, "SCAN_BUDGET", 2)
    monkeypatch.setattr(audit_module, "_BATCH", 2)
    runtime = build_runtime(make_settings(redis_base))
    audit = Audit(runtime.store, runtime.settings)
    audit.record("carol", "job.cancel", owner="carol")
    for _ in range(5):
        audit.record("alice", "job.cancel", owner="alice")
    pages, cursor = [], None
    for _ in range(5):
        page, cursor = audit.query(ADMIN, principal="carol", limit=1, cursor=cursor)
        pages.append([e.principal for e in page])
        if cursor is None:
            break
    assert pages == [[], [], ["carol"], []]  # short pages, each with the cursor to go on from, until none


@pytest.mark.parametrize(("raw", "seconds"), [("", 30 * 86400.0), ("3600", 3600.0), ("30d", 30 * 86400.0),
                                              ("12h", 43200.0), ("15m", 900.0), ("500ms", 0.5)])
def test_the_retention_takes_seconds_or_a_duration(raw: str, seconds: float) -> None:
    assert Settings.from_env({"TASKS_BACKEND_AUDIT_RETENTION": raw}).audit_retention_s == seconds


def test_a_retention_that_is_no_duration_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="TASKS_BACKEND_AUDIT_RETENTION='a month'"):
        Settings.from_env({"TASKS_BACKEND_AUDIT_RETENTION": "a month"})
