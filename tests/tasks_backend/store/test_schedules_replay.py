"""Every schedule script gives the same outcome when applied twice: through a TCP proxy that loses the first
reply to a script call, so that redis-py's own retry applies it again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tasks_backend.service.jobs import JobService
from tasks_backend.service.runtime import Runtime, build_runtime
from tasks_backend.service.schedules import ScheduleService
from tasks_backend.store.schedules import member
from tests.conftest import make_settings, wait_until
from tests.tasks_backend.store.test_replay import DropFirstScriptReply, DropFirstScriptReplyOfAny, lossy_store


@pytest.fixture
def own(redis_base: str) -> Runtime:
    """Keys and a due set of this test's own."""
    return build_runtime(make_settings(redis_base))


#: A schedule service whose store loses the next script call's reply once the proxy is armed.
Faulty = tuple[ScheduleService, DropFirstScriptReply | DropFirstScriptReplyOfAny]


@pytest.fixture
def faulty(own: Runtime) -> Iterator[Faulty]:
    with lossy_store(own) as (store, proxy):
        yield ScheduleService(JobService(store, own.registry, own.dispatcher, own.settings)), proxy


def audited(rt: Runtime, action: str) -> list[str]:
    return [e.target for e in rt.schedules().jobs.audit.query("alice", limit=100)[0] if e.action == action]


def test_a_create_whose_reply_was_lost_is_still_made_by_it(own: Runtime, faulty: Faulty) -> None:
    service, proxy = faulty
    proxy.armed.set()
    _, made = service.define("alice", {"name": "new", "operation": "test.noop", "everySeconds": 60})
    assert proxy.dropped == 1 and made
    assert audited(own, "schedule.create").count("new") == 1
    assert own.store.redis.zscore(own.store.keys.schedules_due(), member("alice", "new")) is not None
    # Another request with the same body is still told it was there already.
    assert service.define("alice", {"name": "new", "operation": "test.noop", "everySeconds": 60})[1] is False


def test_a_delete_whose_reply_was_lost_is_not_told_there_was_none(own: Runtime, faulty: Faulty) -> None:
    service, proxy = faulty
    service.define("alice", {"name": "gone", "operation": "test.noop", "everySeconds": 60})
    proxy.armed.set()
    service.delete("alice", "gone")  # no ScheduleNotFound
    assert proxy.dropped == 1
    keys = own.store.keys
    assert 0 < own.store.redis.pttl(keys.schedule_deleted("alice", "gone")) <= 60_000
    # Another delete is a new request: there is no such schedule any more.
    with pytest.raises(Exception, match="No such schedule"):
        service.delete("alice", "gone")


def test_a_take_whose_reply_was_lost_hands_its_ticker_what_it_took(own: Runtime, faulty: Faulty) -> None:
    service, proxy = faulty
    service.define("alice", {"name": "two", "operation": "test.noop", "everySeconds": 2, "catchUp": "none"})
    tick = service.get("alice", "two").next_ms
    wait_until(lambda: service.store.now_ms() >= tick, timeout=15, message="the tick")
    proxy.armed.set()
    done = service.ticker().tick_once()
    assert proxy.dropped == 1
    assert (done.looked, done.jobs) == (1, 1)
    assert [r.idempotency_key for r in service.jobs_of("alice", "two")[0]] == [
        f"schedule:two:{service.get('alice', 'two').generation}:{tick}"]


def test_a_claim_and_a_finish_whose_replies_were_lost_answer_as_they_did(own: Runtime, faulty: Faulty) -> None:
    service, proxy = faulty
    service.define("alice", {"name": "c", "operation": "test.noop", "everySeconds": 60})
    read = service.get("alice", "c")
    proxy.armed.set()
    assert service.store.claim_many([(read, [read.next_ms], read.next_ms + 60_000)]) == [True]
    assert proxy.dropped == 1
    claimed = service.get("alice", "c")
    assert claimed.pending == (read.next_ms,)
    job_id = service.fire(claimed, read.next_ms)
    proxy.armed.set()
    assert service.store.finish_many([(claimed, claimed.pending, [(job_id, read.next_ms)])]) == [
        read.next_ms + 60_000]
    assert proxy.dropped == 2
    finished = service.get("alice", "c")
    assert (finished.pending, finished.last_job_id) == ((), job_id)
