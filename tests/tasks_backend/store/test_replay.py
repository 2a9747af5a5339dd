"""Every script gives the same outcome when applied twice.

redis-py sends a command again after a connection error, so a script whose reply was lost runs twice.
Each state change is tried both ways: the store method called twice with one request id, and end to
end through a TCP proxy that drops the first reply to a script call (so redis-py's own retry replays it).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tasks_backend import Principal
from tasks_backend.model.domain import JobState
from tasks_backend.service.jobs import JobService
from tasks_backend.service.runtime import Runtime, build_runtime
from tasks_backend.store.claims import ClaimTerms, read_claim
from tasks_backend.store.connect import connect, connect_cluster
from tasks_backend.store.fields import Change
from tasks_backend.store.jobs import RedisStore
from tests.conftest import make_settings, single_redis, wait_until

pytestmark = pytest.mark.usefixtures("worker")
ALICE = Principal("alice")


class DropFirstScriptReply:
    """A TCP proxy to Redis that, once armed, swallows the reply to the next EVALSHA and cuts that
    connection, as a network fault after Redis applied the script would."""

    def __init__(self, upstream: tuple[str, int], armed: threading.Event | None = None) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed = armed or threading.Event()
        self.dropped = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            drop_next = threading.Event()
            threading.Thread(target=self._requests, args=(client, server, drop_next), daemon=True).start()
            threading.Thread(target=self._replies, args=(server, client, drop_next), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket, drop_next: threading.Event) -> None:
        try:
            while data := client.recv(65536):
                if self.armed.is_set() and b"EVALSHA" in data.upper():
                    self.armed.clear()
                    drop_next.set()
                server.sendall(data)
        except OSError:
            pass
        finally:
            server.close()

    def _replies(self, server: socket.socket, client: socket.socket, drop_next: threading.Event) -> None:
        try:
            while data := server.recv(65536):
                if drop_next.is_set():
                    self.dropped += 1
                    break  # the script ran; its caller never hears so
                client.sendall(data)
        except OSError:
            pass
        finally:
            client.shutdown(socket.SHUT_RDWR)
            client.close()
            server.close()

    def close(self) -> None:
        self.listener.close()


class DropFirstScriptReplyOfAny:
    """One such proxy per node of a Redis Cluster, armed together: the next EVALSHA to any node loses its reply."""

    def __init__(self, upstreams: list[tuple[str, int]]) -> None:
        self.armed = threading.Event()
        self.proxies = {u: DropFirstScriptReply(u, self.armed) for u in upstreams}

    @property
    def dropped(self) -> int:
        return sum(p.dropped for p in self.proxies.values())

    def remap(self, address: tuple[str, int]) -> tuple[str, int]:
        """The cluster names its nodes' own addresses; the client is sent to their proxies instead."""
        proxy = self.proxies.get(address)
        return ("127.0.0.1", proxy.port) if proxy else address

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.close()


Proxied = tuple[JobService, DropFirstScriptReply | DropFirstScriptReplyOfAny]


@contextlib.contextmanager
def lossy_store(runtime: Runtime) -> Iterator[tuple[RedisStore, DropFirstScriptReply | DropFirstScriptReplyOfAny]]:
    """A store on the runtime's Redis (one server or a Cluster) through proxies that, once armed, lose the next
    script call's reply."""
    current: Any = runtime.store.redis
    proxy: DropFirstScriptReply | DropFirstScriptReplyOfAny
    if isinstance(current, redis.Redis):
        kwargs = current.connection_pool.connection_kwargs
        proxy = DropFirstScriptReply((kwargs["host"], kwargs["port"]))
        client: Any = connect(f"redis://127.0.0.1:{proxy.port}/{kwargs.get('db', 0)}")
    else:
        proxy = DropFirstScriptReplyOfAny([(n.host, n.port) for n in current.get_primaries()])
        seeds = ",".join(f"127.0.0.1:{p.port}" for p in proxy.proxies.values())
        client = connect_cluster(f"redis+cluster://{seeds}", 2.0, address_remap=proxy.remap)
    try:
        yield RedisStore(client, runtime.store.keys, max_ttl_ms=runtime.store.max_ttl_ms), proxy
    finally:
        client.close()
        proxy.close()


@pytest.fixture
def proxied(runtime: Runtime) -> Iterator[Proxied]:
    with lossy_store(runtime) as (store, proxy):
        yield JobService(store, runtime.registry, runtime.dispatcher, runtime.settings), proxy


def idle_runtime(runtime: Runtime) -> Runtime:
    """The same store, publishing to a queue no worker reads (jobs stay queued until claimed by hand)."""
    return build_runtime(runtime.settings.with_(queue=f"{runtime.settings.queue}-idle"))


def parked(runtime: Runtime, tmp_path: Path) -> str:
    record, _ = runtime.service.submit(ALICE, "test.ask_twice", {"ledger": str(tmp_path / "ledger")})
    wait_until(lambda: runtime.service.get(ALICE, record.id).state is JobState.INPUT_REQUIRED, message="parked")
    return record.id


# -- the same request applied twice ------------------------------------------------------------
def test_input_applied_twice_queues_the_job_once_and_says_so_both_times(runtime: Runtime, tmp_path: Path) -> None:
    job_id = parked(runtime, tmp_path)
    answer = {"first": '{"action": "accept", "content": {"v": 1}}'}
    first = runtime.store.provide_input(job_id, "alice", answer, sweep_in_ms=2000, request_id="in-1")
    again = runtime.store.provide_input(job_id, "alice", answer, sweep_in_ms=2000, request_id="in-1")
    assert first == again == ("queued", 0)
    runtime.service._publish(runtime.service.get(ALICE, job_id))
    wait_until(lambda: "second" in (runtime.service.get(ALICE, job_id).input_requests or {}),
               message="the job to run on to its second question")
    runtime.service.cancel(ALICE, job_id)


def test_cancel_applied_twice_answers_cancelled_both_times(runtime: Runtime) -> None:
    record, _ = idle_runtime(runtime).service.submit(ALICE, "test.noop", {})
    assert runtime.store.request_cancel(record.id, "alice", request_id="c-1") == "cancelled"
    assert runtime.store.request_cancel(record.id, "alice", request_id="c-1") == "cancelled"
    assert runtime.store.request_cancel(record.id, "alice", request_id="c-2") == "terminal"  # a new request


def test_claim_and_transition_applied_twice_report_their_first_outcome(runtime: Runtime) -> None:
    store = runtime.store
    record, _ = idle_runtime(runtime).service.submit(ALICE, "test.noop", {})
    first = store.claim(record.id, ClaimTerms(60_000, "w", 5), request_id="k")
    again = store.claim(record.id, ClaimTerms(60_000, "w", 5), request_id="k")
    assert first[0] == again[0] == "ok" and first[1] is not None and again[1] is not None
    assert first[1].token == again[1].token == 1
    done = [store.transition(record.id, JobState.COMPLETED, token=1, change=Change(result_json="1"), request_id="t")
            for _ in range(2)]
    assert done[0] == done[1] and done[0][:2] == ("ok", "running")
    assert store.get(record.id).state is JobState.COMPLETED  # type: ignore[union-attr]


def test_the_claimed_record_is_the_job_as_the_claim_left_it_first_time_and_replayed(runtime: Runtime) -> None:
    """The claim answers with the hash it read and the fields it wrote; laid together they must be the
    stored job, also for a job carrying notes of an earlier queueing that the claim removes."""
    store = runtime.store
    record, _ = idle_runtime(runtime).service.submit(ALICE, "test.noop", {})
    store.redis.hset(store.keys.job(record.id), mapping={"msg": "Input received; resuming.", "mark": "7", "gone": "1"})
    claims = [store.claim(record.id, ClaimTerms(60_000, "w", 5), request_id="c")
              for _ in range(2)]
    stored = store.get(record.id)
    assert stored is not None and stored.state is JobState.RUNNING and stored.status_message is None
    assert {"mark", "gone", "msg"}.isdisjoint(store.redis.hgetall(store.keys.job(record.id)))
    assert claims[0] == claims[1] == ("ok", stored)


def test_the_claim_made_with_a_fetch_applied_twice_answers_the_same(redis_base: str) -> None:
    """The worker's transport records the message as unacknowledged and claims its job in one script
    (`store.claims.FetchClaim`), forgetting the messages acked since; replayed, it keeps one unacked entry, forgets
    the same, and answers with the first claim. The broker is the store's Redis: a single one."""
    runtime = build_runtime(make_settings(single_redis(redis_base)))
    store = runtime.store
    record, _ = idle_runtime(runtime).service.submit(ALICE, "test.noop", {})
    unacked = [f"{store.keys.prefix}:test-unacked-index", f"{store.keys.prefix}:test-unacked"]
    store.redis.zadd(unacked[0], {"tag-0": 1.0, "tag-00": 1.1})
    store.redis.hset(unacked[1], mapping={"tag-0": '["done"]', "tag-00": '["done too"]'})
    keys = [*store.keys.job_keys(record.id), *unacked]
    args = [*ClaimTerms(60_000, "w", 5).args("f-1"), "tag-1", 1.5, '["kept"]', "tag-0", "tag-00"]
    replies = [read_claim(record.id, store.scripts.call("claim_fetched", keys, *args)) for _ in range(2)]
    for key in unacked:
        store.redis.pexpire(key, 60_000)  # kombu's keys, made by the script: the suite checks every key's TTL
    stored = store.get(record.id)
    assert stored is not None and stored.attempts == 1 and replies[0] == replies[1] == ("ok", stored)
    assert store.redis.hgetall(unacked[1]) == {"tag-1": '["kept"]'}
    assert store.redis.zrange(unacked[0], 0, -1, withscores=True) == [("tag-1", 1.5)]


def test_a_feed_that_is_gone_is_made_again_with_the_jobs_expiry(runtime: Runtime) -> None:
    """A change of a job still going appends to its feed without renewing the feed's expiry (XADD keeps
    it); a feed deleted meanwhile comes back with the job's expiry, never without one."""
    store = runtime.store
    record, _ = idle_runtime(runtime).service.submit(ALICE, "test.noop", {})
    events = store.keys.events(record.id)

    def expires_at(key: str) -> int:  # by Redis's clock (PEXPIRETIME needs Redis 7)
        seconds, micros = store.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000 + int(store.redis.pttl(key))

    assert abs(expires_at(events) - record.expires_ms) <= 2
    outcome, claimed = store.claim(record.id, ClaimTerms(60_000, "w", 5))
    assert outcome == "ok" and claimed is not None and store.redis.xlen(events) == 2
    assert abs(expires_at(events) - record.expires_ms) <= 2
    store.redis.delete(events)
    assert store.progress(record.id, claimed.token, message="half", done=1, total=2) == 0
    assert abs(expires_at(events) - record.expires_ms) <= 2
    assert [e.state for e in store.events(record.id, "0", 0)] == [JobState.RUNNING]


def test_a_completion_keeps_no_request_record_and_its_replay_still_answers_ok(runtime: Runtime) -> None:
    """Only the holder of the current token can complete a job, so a completion needs no reply record (every
    finished job is that much smaller); a replay is told by the job completed under its own token."""
    store = runtime.store
    idle = idle_runtime(runtime).service
    record, _ = idle.submit(ALICE, "test.noop", {})
    claimed = store.claim(record.id, ClaimTerms(60_000, "w", 5))[1]
    assert claimed is not None
    completed = Change.completed("1")
    first = store.transition(record.id, JobState.COMPLETED, token=claimed.token, change=completed, request_id="t")
    again = store.transition(record.id, JobState.COMPLETED, token=claimed.token, change=completed, request_id="t")
    assert first == again and first[:2] == ("ok", "running")
    assert set(store.redis.hgetall(store.keys.job(record.id))).isdisjoint({"rq", "lease", "worker"})
    # Another token, or another outcome, is not the holder's completion.
    assert store.transition(record.id, JobState.COMPLETED, token=claimed.token + 1, change=completed)[0] == "fenced"
    failure = Change(error_json="{}")
    assert store.transition(record.id, JobState.FAILED, token=claimed.token, change=failure)[0] == "fenced"
    # A failure keeps its record: the sweeper also fails jobs without moving the token.
    failing, _ = idle.submit(ALICE, "test.noop", {})
    token = store.claim(failing.id, ClaimTerms(60_000, "w", 5))[1]
    assert token is not None
    failed = [store.transition(failing.id, JobState.FAILED, token=token.token, change=Change(error_json="{}"),
                               request_id="f") for _ in range(2)]
    assert failed[0] == failed[1] and failed[0][0] == "ok"
    assert store.redis.hget(store.keys.job(failing.id), "rq") == "f running"


def test_create_applied_twice_makes_one_job_and_keeps_its_idempotency_key(runtime: Runtime) -> None:
    store = runtime.store
    job_id = "00000000-0000-4000-8000-00000000feed"
    fields = {"owner": "alice", "op": "test.noop", "state": "queued", "ttl": "60000", "poll": "100",
              "params": "{}", "idem": "twice"}
    value = f"{job_id} hash"
    first = store.create(fields, job_id, "alice", idem_key="twice", idem_value=value, ttl_ms=60_000,
                         sweep_in_ms=60_000, request_id="cr")
    again = store.create(fields, job_id, "alice", idem_key="twice", idem_value=value, ttl_ms=60_000,
                         sweep_in_ms=60_000, request_id="cr")
    assert first == again and first[0] is not None and first[1] is None
    other = store.create(fields, job_id, "alice", idem_key="twice", idem_value="other", ttl_ms=60_000,
                         sweep_in_ms=60_000, request_id="cr2")
    assert other[0] is None  # another request cannot reuse the id
    store.discard(job_id)


# -- a lost reply, retried by redis-py ----------------------------------------------------------------
def test_input_whose_reply_was_lost_still_answers_and_resumes_the_job(
        runtime: Runtime, proxied: Proxied, tmp_path: Path) -> None:
    service, proxy = proxied
    job_id = parked(runtime, tmp_path)
    proxy.armed.set()
    resumed = service.provide_input(ALICE, job_id, {"first": {"v": 1}})
    assert proxy.dropped == 1
    assert resumed.state in (JobState.QUEUED, JobState.RUNNING, JobState.INPUT_REQUIRED)
    wait_until(lambda: "second" in (runtime.service.get(ALICE, job_id).input_requests or {}),
               message="the job to run on to its second question")
    runtime.service.cancel(ALICE, job_id)


def test_cancel_whose_reply_was_lost_answers_cancelled(runtime: Runtime,
                                                       proxied: Proxied) -> None:
    service, proxy = proxied
    record, _ = idle_runtime(runtime).service.submit(ALICE, "test.noop", {})
    proxy.armed.set()
    assert service.cancel(ALICE, record.id).state is JobState.CANCELLED
    assert proxy.dropped == 1


def test_claim_and_finish_whose_replies_were_lost_report_success(
        runtime: Runtime, proxied: Proxied) -> None:
    service, proxy = proxied
    store = service.store
    record, _ = idle_runtime(runtime).service.submit(ALICE, "test.noop", {})
    proxy.armed.set()
    outcome, claimed = store.claim(record.id, ClaimTerms(60_000, "w", 5))
    assert (outcome, proxy.dropped) == ("ok", 1) and claimed is not None
    proxy.armed.set()
    finished = store.transition(record.id, JobState.COMPLETED, token=claimed.token, change=Change(result_json="2"))
    assert (finished[0], proxy.dropped) == ("ok", 2)
    assert runtime.service.get(ALICE, record.id).result == 2
