"""Chaos with real processes and real signals: killed pool processes and workers, a Redis restart,
lost publishes, poison jobs. Each test gets its own queue, key prefix, worker and sweeper processes, and
runs once with the store's Redis as the broker and once with RabbitMQ (the `broker` fixture)."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from werkzeug.serving import make_server

from adapters.app import create_app
from tasks_backend import Principal
from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import EmbeddedRedis
from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import Runtime, build_runtime
from tests.conftest import show_logs_on_failure, wait_until
from tests.support import rabbit
from tests.support.procs import Proc, sweeper_process, tails, worker_process

pytestmark = pytest.mark.chaos
ALICE = Principal("alice")


def lines(ledger: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in ledger.read_text().splitlines()] if ledger.exists() else []


def effects(ledger: Path) -> list[int]:
    return sorted(e["step"] for e in lines(ledger) if e["event"] == "effect")


def starts(ledger: Path) -> list[dict[str, Any]]:
    return [e for e in lines(ledger) if e["event"] == "start"]


def open_gate(gate: Path, step: int) -> None:
    Path(f"{gate}.{step}").touch()


def state(rt: Runtime, job_id: str) -> JobState:
    return rt.service.get(ALICE, job_id).state


class Cluster:
    """Workers and a sweeper as separate processes, plus the service to submit and read with."""

    def __init__(self, settings: Settings, tmp: Path) -> None:
        self.settings, self.tmp = settings, tmp
        self.runtime = build_runtime(settings)
        self.procs: list[Proc] = []

    def worker(self, name: str, **kw: Any) -> Proc:
        proc = worker_process(self.settings, self.tmp / f"{name}.log", **kw)
        self.procs.append(proc)
        return proc

    def sweeper(self) -> Proc:
        proc = sweeper_process(self.settings, self.tmp / "sweeper.log")
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()

    def logs(self) -> str:
        return tails(self.procs)


@pytest.fixture
def cluster(make_broker_settings: Callable[..., Settings], tmp_path: Path,
            request: pytest.FixtureRequest) -> Iterator[Cluster]:
    settings = make_broker_settings(lease_s=1.5, queued_grace_s=1.0, sweep_interval_s=0.2,
                             visibility_timeout_s=30.0)
    c = Cluster(settings, tmp_path)
    show_logs_on_failure(request, c.logs)
    try:
        yield c
    finally:
        c.stop()


def run_to_gate(cluster: Cluster, tmp_path: Path) -> tuple[str, Path, Path]:
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    record, _ = cluster.runtime.service.submit(ALICE, "test.steps", {"ledger": str(ledger), "steps": 3,
                                                                      "gate": str(gate)})
    # Wait for step 0's record, not just its effect: a kill between the two would repeat the effect,
    # which only a downstream that deduplicates on ctx.idempotency_key can prevent (see the README).
    wait_until(lambda: effects(ledger) == [0] and cluster.runtime.store.recorded_step(record.id, "s0"), 30,
               message="step 0 to run and be recorded")
    return record.id, ledger, gate


def in_gate(cluster: Cluster) -> tuple[int, int]:
    """(jobs in flight, jobs known) in the dispatch gate: both 0 once every job is done, its slot given back once."""
    store, queue = cluster.runtime.store, cluster.settings.queue
    return int(store.redis.zcard(store.keys.gate(queue, "flight"))), int(store.redis.hlen(store.keys.gate(queue,
                                                                                                          "jobs")))


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_a_worker_told_to_hand_back_on_stop_returns_its_running_job_to_the_queue_at_once(
        cluster: Cluster, tmp_path: Path, pool: str) -> None:
    """`--hand-back-on-stop` (what `tasks-backend run` starts): SIGTERM hands the running job back at its next
    cancellation point, not counted as an attempt, and another worker resumes it from its last recorded step."""
    old = cluster.worker("old", pool=pool, concurrency=1, options=["--hand-back-on-stop"])
    job_id, ledger, gate = run_to_gate(cluster, tmp_path)
    os.kill(old.pid, signal.SIGTERM)
    old.popen.wait(30)  # it does not wait for the job, which waits for a gate nobody opens
    assert old.popen.returncode == 0, old.output()[-3000:]
    record = cluster.runtime.store.get(job_id)  # no sweeper runs: only the hand-back can have queued it
    assert record is not None and record.state is JobState.QUEUED and record.attempts == 0, record
    cluster.worker("new", concurrency=1)
    wait_until(lambda: len(starts(ledger)) == 2, 30, message="the job to start again on the new worker")
    open_gate(gate, 1)
    open_gate(gate, 2)
    wait_until(lambda: state(cluster.runtime, job_id) is JobState.COMPLETED, 30, message="completion")
    assert effects(ledger) == [0, 1, 2]


def test_sigkill_of_the_pool_process_resumes_with_each_effect_once(cluster: Cluster, tmp_path: Path) -> None:
    cluster.worker("w1", concurrency=1)
    cluster.sweeper()
    job_id, ledger, gate = run_to_gate(cluster, tmp_path)
    child = starts(ledger)[0]["pid"]
    os.kill(child, signal.SIGKILL)
    wait_until(lambda: len(starts(ledger)) == 2, 60, message="the job to be resumed in a new pool process")
    assert starts(ledger)[1]["pid"] != child
    open_gate(gate, 1)
    open_gate(gate, 2)
    wait_until(lambda: state(cluster.runtime, job_id) is JobState.COMPLETED, 30, message="completion")
    assert effects(ledger) == [0, 1, 2]
    assert cluster.runtime.service.get(ALICE, job_id).attempts == 2
    assert in_gate(cluster) == (0, 0)  # the run that ended gave the slot back; the killed one never held a second


def test_killed_worker_is_replaced_and_the_job_picked_up(cluster: Cluster, tmp_path: Path) -> None:
    first = cluster.worker("w1", concurrency=1)
    cluster.sweeper()
    job_id, ledger, gate = run_to_gate(cluster, tmp_path)
    first.kill_group(signal.SIGKILL)
    first.popen.wait(10)
    cluster.worker("w2", concurrency=1)
    wait_until(lambda: len(starts(ledger)) == 2, 60, message="the job to be picked up by the new worker")
    open_gate(gate, 1)
    open_gate(gate, 2)
    wait_until(lambda: state(cluster.runtime, job_id) is JobState.COMPLETED, 30, message="completion")
    assert effects(ledger) == [0, 1, 2]
    assert in_gate(cluster) == (0, 0)


def test_poison_job_fails_after_bounded_attempts(make_broker_settings: Callable[..., Settings],
                                                 tmp_path: Path) -> None:
    settings = make_broker_settings(lease_s=1.0, queued_grace_s=1.0, sweep_interval_s=0.2, max_attempts=2)
    cluster = Cluster(settings, tmp_path)
    try:
        cluster.worker("w1", concurrency=1)
        cluster.sweeper()
        ledger = tmp_path / "ledger"
        record, _ = cluster.runtime.service.submit(ALICE, "test.crash", {"ledger": str(ledger)})
        wait_until(lambda: state(cluster.runtime, record.id) is JobState.FAILED, 60, message="giving up")
        failed = cluster.runtime.service.get(ALICE, record.id)
        assert failed.error is not None and failed.error["type"] == "WorkerLost"
        assert len(starts(ledger)) == 2
        # No run reported its end: the slot comes back through the claim that gave up, or the pump's prune.
        wait_until(lambda: in_gate(cluster) == (0, 0), 60, message="the slot given back")
    finally:
        cluster.stop()


def test_lost_publish_is_republished_by_the_sweeper(cluster: Cluster, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    record, _ = cluster.runtime.service.submit(ALICE, "test.steps", {"ledger": str(ledger), "steps": 1})
    # The message is gone, as in the BRPOP loss window (Redis) or a queue lost with its node (RabbitMQ).
    if cluster.settings.broker_url is None:
        assert redis.Redis.from_url(cluster.settings.effective_broker_url).delete(cluster.settings.queue) == 1
    else:
        assert rabbit.purge(cluster.settings) == 1
    cluster.worker("w1", concurrency=1)
    cluster.sweeper()
    wait_until(lambda: state(cluster.runtime, record.id) is JobState.COMPLETED, 30, message="completion")
    assert effects(ledger) == [0]


def test_broker_unreachable_at_submit_still_runs_the_job(cluster: Cluster, tmp_path: Path) -> None:
    dead = cluster.settings.with_(broker_url="redis://127.0.0.1:1/0" if cluster.settings.broker_url is None
                                  else rabbit.DEAD_AMQP_URL)
    submitting = build_runtime(dead)
    ledger = tmp_path / "ledger"
    record, _ = submitting.service.submit(ALICE, "test.steps", {"ledger": str(ledger), "steps": 1})
    assert state(cluster.runtime, record.id) is JobState.QUEUED
    cluster.worker("w1", concurrency=1)
    cluster.sweeper()
    wait_until(lambda: state(cluster.runtime, record.id) is JobState.COMPLETED, 30, message="completion")
    assert effects(ledger) == [0]


def test_parked_jobs_hold_no_worker(cluster: Cluster, tmp_path: Path) -> None:
    cluster.worker("w1", concurrency=2)
    svc = cluster.runtime.service
    parked = [svc.submit(ALICE, "demo.refund", {"order_id": f"o{i}", "amount": 1})[0].id for i in range(6)]
    wait_until(lambda: all(state(cluster.runtime, j) is JobState.INPUT_REQUIRED for j in parked), 30,
               message="six parked jobs")
    fresh, _ = svc.submit(ALICE, "test.noop", {})
    wait_until(lambda: state(cluster.runtime, fresh.id) is JobState.COMPLETED, 15, message="a new job to run")
    svc.provide_input(ALICE, parked[0], {"approval": {"approved": True}})
    wait_until(lambda: state(cluster.runtime, parked[0]) is JobState.COMPLETED, 15, message="the answered job")


def test_redis_restart_mid_job(make_broker_settings: Callable[..., Settings], tmp_path: Path) -> None:
    """Redis (AOF on) restarts mid-job: the API answers 503 meanwhile, then everything carries on.

    The worker has a free pool slot, so its main loop is blocked in BRPOP when Redis goes away (with its
    only slot busy it reads nothing, and a broken teardown of that read went unseen): it reconnects and
    takes new work instead of shutting down."""
    data = tmp_path / "redis"
    data.mkdir()
    server = EmbeddedRedis(appendonly=True, data_dir=str(data)).start()
    base = f"redis://127.0.0.1:{server.port}"
    settings = make_broker_settings(base, lease_s=1.5, queued_grace_s=1.0, sweep_interval_s=0.2,
                                    redis_socket_timeout_s=1.0)
    cluster = Cluster(settings, tmp_path)
    http_server = make_server("127.0.0.1", 0, create_app(settings), threaded=True)
    threading.Thread(target=http_server.serve_forever, daemon=True).start()
    api = httpx.Client(base_url=f"http://127.0.0.1:{http_server.server_port}", timeout=10,
                       headers={"Authorization": "Bearer alice-token"})
    try:
        worker = cluster.worker("w1", concurrency=2)
        sweeper = cluster.sweeper()
        job_id, ledger, gate = run_to_gate(cluster, tmp_path)
        server.stop()
        down = api.get(f"/v1/jobs/{job_id}")
        assert down.status_code == 503 and down.headers["Retry-After"]
        assert down.headers["content-type"] == "application/problem+json"
        submit = api.post("/v1/jobs", json={"operation": "test.noop"})
        assert submit.status_code == 503
        assert api.get("/healthz").status_code == 503
        server.start()
        wait_until(lambda: api.get(f"/v1/jobs/{job_id}").status_code == 200, 15, message="the API to recover")
        open_gate(gate, 1)
        open_gate(gate, 2)
        wait_until(lambda: api.get(f"/v1/jobs/{job_id}").json()["status"] == "completed", 90,
                   message="the job to finish after the restart")
        assert effects(ledger) == [0, 1, 2]
        after = api.post("/v1/jobs", json={"operation": "test.noop"}).json()["taskId"]
        wait_until(lambda: api.get(f"/v1/jobs/{after}").json()["status"] == "completed", 30,
                   message="a new job after the restart")
        assert worker.alive() and sweeper.alive()
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        api.close()
        http_server.shutdown()
        cluster.stop()
        server.stop()


def test_deploy_sigterm_lets_the_running_job_finish(cluster: Cluster, tmp_path: Path) -> None:
    """A deploy stops workers with SIGTERM: the running job finishes, nothing is run twice."""
    old = cluster.worker("old", concurrency=1)
    cluster.sweeper()
    job_id, ledger, gate = run_to_gate(cluster, tmp_path)
    os.kill(old.pid, signal.SIGTERM)
    open_gate(gate, 1)
    open_gate(gate, 2)
    wait_until(lambda: state(cluster.runtime, job_id) is JobState.COMPLETED, 30, message="completion")
    old.popen.wait(30)
    cluster.worker("new", concurrency=1)
    fresh, _ = cluster.runtime.service.submit(ALICE, "test.noop", {})
    wait_until(lambda: state(cluster.runtime, fresh.id) is JobState.COMPLETED, 30, message="the new worker")
    assert effects(ledger) == [0, 1, 2] and len(starts(ledger)) == 1
