"""The job store on a real three-primary Redis Cluster (loopback ports), with a plain Redis as the broker.

The part of the cluster run that `make test` keeps: jobs spread over every node run to the end, owner
listings and idempotency records (the owner's slot) agree with the jobs (each in a slot of its own), and the
cluster really refuses what the store must never send. `make test-cluster` runs the whole service suite on
a cluster.
"""

from __future__ import annotations

import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.exceptions import ClusterCrossSlotError, CrossSlotTransactionError, RedisClusterException

from adapters.app import create_app
from tasks_backend import Principal, SubmitOutcome
from tasks_backend.config import Settings
from tasks_backend.devtools.embedded_cluster import LocalCluster
from tasks_backend.errors import IdempotencyConflict, StoreUnavailable
from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import Runtime, build_runtime
from tasks_backend.store.claims import ClaimTerms
from tasks_backend.store.connect import NativePacker
from tests.conftest import ALICE, make_settings, wait_until
from tests.support.procs import worker_process
from tests.support.waits import assert_a_parent_woken_as_it_parks_is_published
from tests.tasks_backend.store.test_feeds import Cut, append_once_reading, cut_when_blocked


@pytest.fixture(scope="module")
def cluster_url(redis_base: str) -> Iterator[str]:
    """The suite's cluster when it runs on one, else one started for this module."""
    existing = getattr(redis_base, "store_url", None)
    if existing:
        yield existing
        return
    cluster = LocalCluster().start()
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def cluster_settings(redis_base: str, cluster_url: str) -> Settings:
    return make_settings(redis_base, redis_url=cluster_url, broker_url=f"{redis_base}/14", rate_limit=0)


@pytest.fixture(scope="module")
def cluster_runtime(cluster_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    # A worker process of its own: a second in-process Celery worker would share the session worker's app state.
    worker = worker_process(cluster_settings, tmp_path_factory.mktemp("cluster") / "worker.log", pool="threads",
                            concurrency=4)
    try:
        yield build_runtime(cluster_settings)
    finally:
        worker.stop()


def nodes_of(runtime: Runtime, keys: list[str]) -> set[str]:
    client: Any = runtime.store.redis
    return {client.get_node_from_key(k).name for k in keys}


def test_a_cluster_cannot_be_the_broker(cluster_url: str) -> None:
    with pytest.raises(ValueError, match="CELERY_BROKER_URL"):
        build_runtime(Settings(redis_url=cluster_url))


def test_jobs_on_every_node_run_to_the_end(cluster_runtime: Runtime) -> None:
    service, owner = cluster_runtime.service, f"spread-{secrets.token_hex(3)}"
    ids = [service.submit(owner, "test.noop", {})[0].id for _ in range(24)]
    assert len(nodes_of(cluster_runtime, [cluster_runtime.store.keys.job(i) for i in ids])) == 3
    for job_id in ids:
        wait_until(lambda j=job_id: service.get(owner, j).state is JobState.COMPLETED, 20, message=f"{job_id} done")
    client: Any = cluster_runtime.store.redis
    for node in client.get_nodes():  # every node's connections pack with hiredis alone (store.connect)
        assert isinstance(node.redis_connection.connection_pool.make_connection()._command_packer, NativePacker)


def test_owner_listings_and_idempotency_records_across_slots(cluster_runtime: Runtime) -> None:
    service, keys = cluster_runtime.service, cluster_runtime.store.keys
    owners = [f"lister-{i}-{secrets.token_hex(3)}" for i in range(6)]
    assert len(nodes_of(cluster_runtime, [keys.owner_index(o) for o in owners])) > 1
    made: dict[str, list[str]] = {o: [] for o in owners}
    for round_ in range(5):
        for owner in owners:
            record, outcome = service.submit(owner, "test.noop", {}, idempotency_key=f"k{round_}")
            assert outcome is SubmitOutcome.CREATED
            made[owner].append(record.id)
    for owner in owners:
        # A replay of each key, from any slot's point of view, answers the job it made.
        for round_, job_id in enumerate(made[owner]):
            again, outcome = service.submit(Principal(owner), "test.noop", {}, idempotency_key=f"k{round_}")
            assert (again.id, outcome) == (job_id, SubmitOutcome.EXISTING)
        with pytest.raises(IdempotencyConflict):
            service.submit(owner, "test.counted", {"fail": False}, idempotency_key="k0")
        listed, cursor = service.list(owner, limit=2)
        while cursor is not None:
            page, cursor = service.list(owner, limit=2, cursor=cursor)
            listed += page
        assert [r.id for r in listed] == made[owner][::-1]  # newest first, and only this owner's
        assert service.count(owner) == 5


def test_the_cluster_refuses_commands_across_slots(cluster_runtime: Runtime) -> None:
    """What the store is checked never to send (see test_cluster_slots) fails on a cluster."""
    client: Any = cluster_runtime.store.redis
    keys = cluster_runtime.store.keys
    job_key, due_key = keys.push_configs("some-job"), keys.push_due()
    assert client.keyslot(job_key) != client.keyslot(due_key)
    with pytest.raises(RedisClusterException):  # the client refuses a script with keys of two slots
        client.eval("return 1", 2, job_key, due_key)
    pipe = client.pipeline(transaction=True)  # a transaction of two slots (`PushStore.put` once did this)
    pipe.hset(job_key, "c", "{}")
    pipe.zadd(due_key, {"some-job": 0})
    with pytest.raises(CrossSlotTransactionError):
        pipe.execute()
    node = redis.Redis(host=client.get_node_from_key(job_key).host, port=client.get_node_from_key(job_key).port)
    with pytest.raises(ClusterCrossSlotError):  # and so does the server, whatever the client
        node.eval("return 1", 2, job_key, due_key)


def test_a_job_s_feed_is_read_blocking_on_its_node_and_a_cut_read_ends_there(cluster_runtime: Runtime) -> None:
    """One job's feed is read with a blocking XREAD on the node of its slot: an entry added meanwhile ends it, and
    a read cut short in the reader is over on that node by the time the store raises (see test_feeds)."""
    store = cluster_runtime.store
    client: Any = store.redis
    job_id = secrets.token_hex(8)
    node = client.get_node_from_key(store.keys.events(job_id))
    observer = redis.Redis(host=node.host, port=node.port, decode_responses=True)

    def reading() -> int:
        return sum(1 for c in observer.client_list() if c["cmd"] == "xread" and "b" in c["flags"])

    writer = append_once_reading(observer, store.keys.events(job_id), lambda: reading() == 1)
    assert [e.state for e in store.events(job_id, "0-0", 4_000)] == [JobState.RUNNING]
    writer.join()
    cut_when_blocked(client.get_redis_connection(node), observer)
    with pytest.raises(Cut):
        store.events(job_id, "$", 4_000)
    assert reading() == 0, observer.client_list()


def test_a_cluster_that_lost_a_node_answers_503_not_500(redis_base: str) -> None:
    """A primary lost without a replica: its own slots refuse connections, and once the others mark it failed
    they answer CLUSTERDOWN for every slot. Both are "try again later" to a caller."""
    cluster = LocalCluster(node_timeout_ms=500).start()
    try:
        settings = make_settings(redis_base, redis_url=cluster.url, broker_url=f"{redis_base}/14", rate_limit=0,
                                 auth_failure_limit=0, max_active_jobs=0)
        runtime = build_runtime(settings)
        ids = [runtime.service.submit("alice", "test.noop", {})[0].id for _ in range(12)]
        client = create_app(runtime=runtime).test_client()
        cluster.nodes[2].stop(kill=True)
        survivor = redis.Redis(port=cluster.nodes[0].port, decode_responses=True)
        wait_until(lambda: survivor.cluster("INFO")["cluster_state"] == "fail", 20, message="the cluster to fail")
        for job_id in ids:
            response = client.get(f"/v1/jobs/{job_id}", headers=ALICE)
            assert response.status_code == 503, (job_id, response.status_code)
            assert int(response.headers["Retry-After"]) > 0
    finally:
        cluster.stop()


def test_a_cluster_with_every_node_lost_answers_503_not_500(redis_base: str) -> None:
    """Every primary lost. Once the client's refresh of the topology has reached no node, redis-py raises its own
    `RedisClusterUnreachableError` rather than a connection error (it backs off between refreshes, so that takes
    a moment): still "try again later" to a caller, on every request for three seconds."""
    cluster = LocalCluster().start()
    try:
        settings = make_settings(redis_base, redis_url=cluster.url, broker_url=f"{redis_base}/14", rate_limit=0,
                                 auth_failure_limit=0, max_active_jobs=0)
        runtime = build_runtime(settings)
        job_id = runtime.service.submit("alice", "test.noop", {})[0].id
        client = create_app(runtime=runtime).test_client()
        cluster.stop()
        statuses: list[int] = []
        until = time.monotonic() + 3.0
        while time.monotonic() < until:
            response = client.get(f"/v1/jobs/{job_id}", headers=ALICE)
            statuses.append(response.status_code)
            if response.status_code == 503:
                assert int(response.headers["Retry-After"]) > 0
        assert len(statuses) > 10 and set(statuses) == {503}, sorted(set(statuses))
    finally:
        cluster.stop()


def test_a_move_back_to_queued_changes_nothing_unless_its_sweep_entry_was_written(redis_base: str) -> None:
    """One Redis runs a pipeline in order, so the sweep entry written before a move into `queued` exists
    whenever the move does. On a cluster the two are on different nodes: with the sweep schedule's node
    stalled (it takes the command and never answers), the move must fail and leave the job as it was."""
    cluster = LocalCluster(node_timeout_ms=60_000).start()  # the others do not mark it failed meanwhile
    stalled = None
    try:
        runtime = build_runtime(make_settings(redis_base, redis_url=cluster.url, broker_url=f"{redis_base}/14",
                                              redis_socket_timeout_s=0.5))
        store, client = runtime.store, runtime.store.redis
        sweep_node = client.get_node_from_key(store.keys.sweep())
        job_id = next(j for j in (runtime.service.submit("alice", "test.noop", {})[0].id for _ in range(50))
                      if client.get_node_from_key(store.keys.job(j)).name != sweep_node.name)
        outcome, claimed = store.claim(job_id, ClaimTerms(60_000, "w", 3))
        assert outcome == "ok" and claimed is not None and claimed.token is not None
        stalled = next(n.process for n in cluster.nodes if n.port == sweep_node.port)
        assert stalled is not None
        stalled.send_signal(signal.SIGSTOP)
        with pytest.raises(StoreUnavailable):
            store.transition(job_id, JobState.QUEUED, token=int(claimed.token), sweep_in_ms=1000)
        record = store.get(job_id)
        assert record is not None and record.state is JobState.RUNNING
    finally:
        if stalled is not None:
            stalled.send_signal(signal.SIGCONT)
        cluster.stop()


def test_a_parent_woken_between_its_park_and_its_leave_is_handed_to_the_workers_at_once(
        redis_base: str, cluster_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # On a cluster the gate lives in a slot of its own, so a run that parks leaves flight in a call after the park.
    # The child ends before the parent's park: the park's own look at the children wakes the parent between the
    # two, while the gate still counts its run in flight and so admits nothing. The leave must then admit it,
    # or it waits for the sweeper. No worker consumes this runtime's queue: the test runs each job itself.
    runtime = build_runtime(make_settings(redis_base, redis_url=cluster_url, broker_url=f"{redis_base}/14",
                                          rate_limit=0))
    assert_a_parent_woken_as_it_parks_is_published(runtime, tmp_path, monkeypatch)
