"""The audit append script in a real Redis: applied twice (a replay after NOSCRIPT or a lost reply), one entry;
one entry, one id in every stream it is written to."""

from __future__ import annotations

import uuid

from tasks_backend.service.runtime import Runtime, build_runtime
from tasks_backend.store.audit import AuditStore
from tests.conftest import make_settings


def test_append_applied_twice_writes_one_entry_and_answers_its_id_both_times(runtime: Runtime) -> None:
    store = runtime.store
    key = store.keys.audit_owner("replayed-owner")
    args = ("uid-1", 60_000, 100, "", "p", "alice", "a", "job.cancel")
    first = store.scripts.call("audit.append", [key], *args)
    again = store.scripts.call("audit.append", [key], *args)
    assert first == again and store.redis.xlen(key) == 1
    other = store.scripts.call("audit.append", [key], "uid-2", *args[1:])
    assert other != first and store.redis.xlen(key) == 2
    assert 0 < store.redis.pttl(key) <= 60_000


def test_an_entry_has_one_id_in_the_system_job_and_owner_streams(redis_base: str) -> None:
    store = build_runtime(make_settings(redis_base)).store  # a key prefix of its own: its system stream is ours
    audit = AuditStore(store)
    job_id = str(uuid.uuid4())
    # The system stream's newest id lies ahead of Redis's clock (as another Cluster node's clock may): ids made
    # per stream would differ, the system's id asked of the others does not.
    ahead = f"{store.now_ms() + 60_000}-0"
    store.redis.xadd(store.keys.audit(), {"uid": "seed", "a": "job.cancel"}, id=ahead)
    for _ in range(3):
        audit.append({"principal": "same-id-owner", "action": "job.cancel", "job_id": job_id,
                      "owner": "same-id-owner"}, retention_ms=120_000)
    newest = [[e.id for e in audit.read(key, before=None, since_ms=0, count=3)]
              for key in (store.keys.audit(), store.keys.audit_job(job_id), store.keys.audit_owner("same-id-owner"))]
    assert newest[0] == newest[1] == newest[2] and len(newest[0]) == 3


def test_a_wanted_id_not_after_the_newest_is_not_used(runtime: Runtime) -> None:
    store = runtime.store
    key = store.keys.audit_owner("late-id-owner")
    newest = store.scripts.call("audit.append", [key], "uid-a", 60_000, 100, "", "a", "job.cancel")
    made = store.scripts.call("audit.append", [key], "uid-b", 60_000, 100, "1-0", "a", "job.cancel")
    assert made != "1-0" and made > newest and store.redis.xlen(key) == 2
