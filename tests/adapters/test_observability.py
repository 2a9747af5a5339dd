"""`/metrics` reports what workers and sweepers recorded; `/readyz` tells Redis and broker trouble apart;
logs are JSON lines that name the job and never carry a token."""

from __future__ import annotations

import io
import json
import logging
import socket
from pathlib import Path
from typing import Any

from adapters.app import create_app
from tasks_backend.access.auth import Principal
from tasks_backend.config import Settings
from tasks_backend.running.stats import JobStats, Tally
from tasks_backend.service.runtime import Runtime, build_runtime
from tasks_backend.serving.logs import JsonFormatter, configure_logging, job_context, mask_secrets
from tests.conftest import ALICE, make_settings, single_redis, wait_until
from tests.support.procs import worker_process


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"redis://127.0.0.1:{s.getsockname()[1]}/0"


def _metric(text: str, line_start: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_metrics_count_outcomes_durations_and_parked_jobs(redis_base: str, settings: Settings, tmp_path: Path) -> None:
    """A deployment of the test's own (keys, queue, a worker process): the parked gauge counts every job of its
    keys, and the suite's jobs park and wake beside it. (A second Celery worker in this process would stop the
    suite's when it stops: Celery keeps a worker's stop in module state.)"""
    own = make_settings(redis_base, tokens=settings.tokens)
    runtime = build_runtime(own)
    client = create_app(runtime=runtime).test_client()
    worker = worker_process(own, tmp_path / "worker.log", pool="threads", concurrency=2)
    try:
        _count_outcomes_durations_and_parked_jobs(runtime, client)
    finally:
        worker.stop()


def _count_outcomes_durations_and_parked_jobs(runtime: Runtime, client: Any) -> None:
    alice = Principal("alice")
    before = client.get("/metrics", headers=ALICE).text
    done, _ = runtime.service.submit(alice, "test.counted", {})
    failed, _ = runtime.service.submit(alice, "test.counted", {"fail": True})
    parked, _ = runtime.service.submit(alice, "demo.refund", {"order_id": "m-1", "amount": 1})
    for record in (done, failed, parked):
        runtime.service.wait(alice, record.id, 60)
    completed = 'tasks_backend_jobs_finished_total{operation="test.counted",outcome="completed"}'
    failures = 'tasks_backend_jobs_finished_total{operation="test.counted",outcome="failed"}'
    count = 'tasks_backend_job_duration_seconds_count{operation="test.counted"}'

    def counted() -> str | None:
        """Workers write their counts once a second, so the figures may lag the jobs by that much."""
        text: str = client.get("/metrics", headers=ALICE).text
        wanted = [_metric(text, name) == _metric(before, name) + n for name, n in
                  ((completed, 1), (failures, 1), (count, 2))]
        return text if all(wanted) and _metric(text, "tasks_backend_jobs_parked ") >= 1 else None

    after = wait_until(counted, 10, message="the metrics to count the three jobs")
    assert 'tasks_backend_job_duration_seconds_bucket{le="+Inf",operation="test.counted"}' in after
    assert "tasks_backend_queue_depth{" in after
    runtime.service.cancel(alice, parked.id)
    assert _metric(client.get("/metrics", headers=ALICE).text, "tasks_backend_jobs_parked ") == _metric(
        after, "tasks_backend_jobs_parked ") - 1


def test_sweeper_actions_are_counted(runtime: Runtime, client: Any) -> None:
    stats = JobStats(runtime.store)
    requeued = 'tasks_backend_sweeper_actions_total{action="requeue"}'
    before = _metric(client.get("/metrics", headers=ALICE).text, requeued)
    stats.sweeper_actions({"requeue": 2})
    after = _metric(client.get("/metrics", headers=ALICE).text, requeued)
    assert after == before + 2
    for name in ("sweeps", "jobs"):
        ttl = runtime.store.redis.pttl(runtime.store.keys.stats(name))
        assert ttl > 0 or ttl == -2, name  # every stats key expires


def test_readyz_names_what_is_down(settings: Settings, redis_base: str) -> None:
    healthy = create_app(runtime=build_runtime(make_settings(redis_base))).test_client().get("/readyz")
    assert healthy.status_code == 200 and healthy.json["failing"] == []

    broker_down = create_app(runtime=build_runtime(make_settings(redis_base, broker_url=_dead_url())))
    answer = broker_down.test_client().get("/readyz")
    assert answer.status_code == 503 and answer.json["failing"] == ["broker"]
    assert answer.json["checks"]["redis"]["ok"] is True and answer.headers["Retry-After"]

    redis_down = create_app(runtime=build_runtime(make_settings(
        redis_base, redis_url=_dead_url(), broker_url=f"{redis_base}/15")))
    answer = redis_down.test_client().get("/readyz")
    assert answer.status_code == 503 and answer.json["failing"] == ["redis"]
    assert answer.json["checks"]["broker"]["ok"] is True
    assert redis_down.test_client().get("/metrics", headers=ALICE).status_code in (200, 401)


def test_json_logs_name_the_job_and_mask_tokens() -> None:
    formatter = JsonFormatter()
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "sent Authorization: Bearer %s", ("abc.def",),
                               None)
    with job_context("job-1", "demo.sleep"):
        line = json.loads(formatter.format(record))
    assert line["taskId"] == "job-1" and line["operation"] == "demo.sleep"
    assert "abc.def" not in line["message"] and "[redacted]" in line["message"]
    assert "taskId" not in json.loads(formatter.format(record))
    assert "s3cret" not in mask_secrets("--basic-auth=ops:s3cret")
    # A one-time answer link's path is its credential.
    assert mask_secrets('"POST /ui/answer/Zx-9_ab HTTP/1.1" 200') == '"POST /ui/answer/[redacted] HTTP/1.1" 200'


def test_a_worker_logs_with_task_id(worker: Any, runtime: Runtime, caplog: Any) -> None:
    configure_logging()  # binds the Celery signals that put the job on every line
    caplog.set_level(logging.INFO)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logging.getLogger("workers").addHandler(handler)
    try:
        record, _ = runtime.service.submit(Principal("logger"), "demo.fail", {"message": "logged"})
        wait_until(lambda: record.id in stream.getvalue(), 30, message="the worker's log line")
    finally:
        logging.getLogger("workers").removeHandler(handler)
        for installed in [h for h in logging.getLogger().handlers if h.get_name() == "tasks_backend"]:
            logging.getLogger().removeHandler(installed)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    mine = [line for line in lines if record.id in line["message"]]
    assert mine[0]["taskId"] == record.id and mine[0]["operation"] == "demo.fail"


def test_running_jobs_and_live_workers_are_reported(worker: Any, runtime: Runtime, client: Any,
                                                    tmp_path: Any) -> None:
    """A job a worker runs is counted while it runs and not after; the worker's published slots count it alive."""
    alice = Principal("alice")
    gate = tmp_path / "go"
    record, _ = runtime.service.submit(alice, "test.wait_then", {"ledger": str(tmp_path / "ledger"),
                                                                 "gate": str(gate), "then": "return"})

    def scrape() -> str:
        return str(client.get("/metrics", headers=ALICE).text)

    def running() -> str | None:
        text = scrape()
        return text if _metric(text, "tasks_backend_jobs_running ") >= 1 else None

    text = wait_until(running, 10, message="the running job in the metrics")
    assert _metric(text, "tasks_backend_workers_alive ") >= 1
    assert _metric(text, "tasks_backend_worker_slots ") >= 4  # the in-process worker's four threads
    gate.touch()
    runtime.service.wait(alice, record.id, 30)
    wait_until(lambda: _metric(scrape(), "tasks_backend_jobs_running ") == 0, 10, message="the job to leave the gauge")


def test_backlog_held_delayed_and_its_age(redis_base: str) -> None:
    """With no worker and room for one job in flight: one job goes to the broker and waits there (its age grows),
    the owner's next goes past the gate while it is alone, another owner's two are held by the gate, one is
    delayed."""
    runtime = build_runtime(make_settings(redis_base, dispatch_slots=1))
    client = create_app(runtime=runtime).test_client()
    alice, bob = Principal("alice"), Principal("bob")
    for who in (alice, alice, bob, bob):
        runtime.service.submit(who, "test.counted", {})
    runtime.service.submit(alice, "test.counted", {}, delay_ms=60_000)

    def aged() -> str | None:
        text: str = client.get("/metrics", headers=ALICE).text
        return text if _metric(text, "tasks_backend_backlog_oldest_seconds ") >= 1 else None

    text = wait_until(aged, 10, interval=0.2, message="the waiting job's age to reach a second")
    assert _metric(text, "tasks_backend_jobs_in_flight ") == 1
    # On a Redis Cluster, never the broker, there is no bypass: alice's second is held too.
    assert _metric(text, "tasks_backend_jobs_held ") == (2 if runtime.service.admission.inline else 3)
    assert _metric(text, "tasks_backend_jobs_delayed ") == 1
    assert _metric(text, "tasks_backend_workers_alive ") == 0
    assert _metric(text, "tasks_backend_jobs_running ") == 0


def test_the_backlogs_age_counts_a_lone_owners_jobs_sent_past_the_gate(redis_base: str) -> None:
    """A lone owner's jobs past the slots go to the bypass list at their submit, not into flight: the oldest of
    them counts in the backlog's age once the job in flight no longer waits."""
    runtime = build_runtime(make_settings(single_redis(redis_base), dispatch_slots=1))
    client = create_app(runtime=runtime).test_client()
    alice = Principal("alice")
    first, _ = runtime.service.submit(alice, "test.counted", {})
    runtime.service.submit(alice, "test.counted", {})
    runtime.service.cancel(alice, first.id)

    def aged() -> str | None:
        text: str = client.get("/metrics", headers=ALICE).text
        return text if _metric(text, "tasks_backend_backlog_oldest_seconds ") >= 1 else None

    text = wait_until(aged, 10, interval=0.2, message="the bypassed job's age to reach a second")
    assert _metric(text, "tasks_backend_jobs_held ") == 0


def test_push_outcomes_are_counted(runtime: Runtime, client: Any) -> None:
    """Push delivery's tally (many threads, one write a second) adds to the shared counters, which expire."""
    failed = 'tasks_backend_push_deliveries_total{outcome="failed"}'
    delivered = 'tasks_backend_push_deliveries_total{outcome="delivered"}'
    before = client.get("/metrics", headers=ALICE).text
    tally = Tally(JobStats(runtime.store), "push")
    for outcome in ("failed", "failed", "delivered"):
        tally.add(outcome)
    tally.write(every_s=3600)  # not yet: written at most that often
    assert _metric(client.get("/metrics", headers=ALICE).text, failed) == _metric(before, failed)
    tally.write()
    after = client.get("/metrics", headers=ALICE).text
    assert _metric(after, failed) == _metric(before, failed) + 2
    assert _metric(after, delivered) == _metric(before, delivered) + 1
    assert runtime.store.redis.pttl(runtime.store.keys.stats("push")) > 0
