"""The audit append script in a real Redis: applied twice (a replay after NOSCRIPT or a lost reply), one entry."""

from __future__ import annotations

from tasks_backend.service.runtime import Runtime


def test_append_applied_twice_writes_one_entry_and_answers_its_id_both_times(runtime: Runtime) -> None:
    store = runtime.store
    key = store.keys.audit_owner("replayed-owner")
    args = ("uid-1", 60_000, 100, "p", "alice", "a", "job.cancel")
    first = store.scripts.call("audit.append", [key], *args)
    again = store.scripts.call("audit.append", [key], *args)
    assert first == again and store.redis.xlen(key) == 1
    other = store.scripts.call("audit.append", [key], "uid-2", *args[1:])
    assert other != first and store.redis.xlen(key) == 2
    assert 0 < store.redis.pttl(key) <= 60_000
