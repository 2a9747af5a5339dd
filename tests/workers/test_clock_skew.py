"""A worker whose clock runs 40 s behind the sweeper's, and a web host an hour fast, as separate processes: Redis
is the one clock.

The worker runs under libfaketime (Debian's `libfaketime` package), so every host-clock reading in its
processes is 40 s late; its monotonic clock is left alone (timeouts, sleeps). Leases it writes must
still read as live to a sweeper with a correct clock: no job is requeued, rerun or failed `WorkerLost`.
(`tests/support/faketime` works around a libfaketime bug with Python's `time.sleep`.)

The skewed worker runs its jobs on threads, not forked pool processes: under libfaketime 0.9.10 a process forked
from a multithreaded Python one (the worker's main process runs background loops) can hang for good inside
libfaketime's `pthread_cond_init` as Python rebuilds its GIL, on a lock of libfaketime's copied while another thread
held it (one fork in a hundred with four busy threads). The times compared are the same on either pool.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tasks_backend import Principal
from tasks_backend.devtools.embedded import free_port
from tasks_backend.model.domain import JobState
from tasks_backend.store.jobs import RedisStore
from tests.conftest import make_settings, show_logs_on_failure, wait_until
from tests.support.procs import ROOT, Proc, wait_for_http, web_process
from tests.workers.test_durability import Cluster, effects, open_gate, starts

pytestmark = pytest.mark.chaos
ALICE = Principal("alice")
SHIM = Path(__file__).resolve().parents[1] / "support" / "faketime"


def libfaketime() -> Path:
    """The path of libfaketime's preload library, installing Debian's package if it is missing."""
    def find() -> Path | None:
        try:
            listing = subprocess.run(["dpkg", "-L", "libfaketime"], capture_output=True, text=True, check=False)
        except FileNotFoundError:
            return None
        for line in listing.stdout.splitlines():
            if line.endswith("/libfaketime.so.1"):
                return Path(line)
        return None

    found = find()
    if found is None and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "libfaketime"], capture_output=True, check=False)
        found = find()
    assert found is not None and found.exists(), (
        "libfaketime is needed to skew a worker's clock: `apt-get install -y libfaketime` (Debian)")
    return found


@pytest.fixture
def skewed(redis_base: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    settings = make_settings(redis_base, lease_s=1.5, queued_grace_s=1.0, sweep_interval_s=0.2,
                             visibility_timeout_s=30.0)
    cluster = Cluster(settings, tmp_path)
    show_logs_on_failure(request, cluster.logs)
    try:
        yield cluster
    finally:
        cluster.stop()


def where_stuck(worker: Proc, store: RedisStore, job_ids: list[str]) -> str:
    """Each job's stored fields, after every thread of the skewed worker wrote its stack to the worker's log
    (the shim's SIGUSR2 handler), for a failure to say where the worker stood."""
    dumped = worker.output().count("Current thread") + worker.output().count("Thread 0x")
    with contextlib.suppress(ProcessLookupError):
        os.kill(worker.pid, signal.SIGUSR2)
    with contextlib.suppress(AssertionError):
        wait_until(lambda: worker.output().count("Current thread") + worker.output().count("Thread 0x") > dumped,
                   5, message="the worker's stacks")
    return "\n".join(f"job {job_id}: {store.redis.hgetall(store.keys.job(job_id))}" for job_id in job_ids)


def test_a_worker_40s_behind_keeps_its_leases_and_runs_each_job_once(skewed: Cluster, tmp_path: Path) -> None:
    library = libfaketime()
    path = os.pathsep.join([str(SHIM), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    worker = skewed.worker("late", pool="threads", concurrency=3, LD_PRELOAD=str(library), FAKETIME="-40s",
                           FAKETIME_DONT_FAKE_MONOTONIC="1", PYTHONPATH=path)
    skewed.sweeper()
    service, store = skewed.runtime.service, skewed.runtime.store
    jobs: list[tuple[str, Path, Path]] = []
    for n in range(3):
        ledger, gate = tmp_path / f"ledger{n}", tmp_path / f"gate{n}"
        record, _ = service.submit(ALICE, "test.steps", {"ledger": str(ledger), "steps": 3, "gate": str(gate)})
        jobs.append((record.id, ledger, gate))
    try:
        for job_id, ledger, _ in jobs:
            wait_until(lambda ledger=ledger: effects(ledger) == [0], 30, message=f"job {job_id} to start")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{where_stuck(worker, store, [j for j, _, _ in jobs])}") from exc

    # Several lease periods of sweeper passes while the jobs run: with each process's own clock, every
    # lease the worker wrote looked 38.5 s lapsed to the sweeper.
    sweeps = store.keys.stats("sweeps")

    def looks() -> int:
        return sum(int(v) for v in store.redis.hgetall(sweeps).values())

    wait_until(lambda: looks() >= 12, 30, message="the sweeper to look at the running jobs a few times")
    for _, _, gate in jobs:
        open_gate(gate, 1)
        open_gate(gate, 2)
    for job_id, ledger, _ in jobs:
        wait_until(lambda job_id=job_id: service.get(ALICE, job_id).terminal, 30, message="the end")
        done = service.get(ALICE, job_id)
        assert (done.state, done.attempts, done.error) == (JobState.COMPLETED, 1, None), done
        assert len(starts(ledger)) == 1 and effects(ledger) == [0, 1, 2]
        # Never requeued (a message republished before the first claim would be harmless, and is not
        # what this test is about: a slow pool process may take longer than the grace to claim).
        assert [e.message for e in store.events(job_id, "0-0", 0) if e.state is JobState.QUEUED
                and e.message] == [], job_id
    assert worker.alive()
    # Every line was written before now, so a clock 40 s behind stamps even the latest one over 30 s ago, however
    # long the worker took to start on a loaded machine.
    stamps = [json.loads(line)["ts"] for line in worker.output().splitlines() if line.startswith('{"ts"')]
    latest = max(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() for ts in stamps)
    assert latest < time.time() - 30, "the worker's clock was not skewed"
    assert "WorkerLost" not in worker.output()


def _rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_a_web_host_an_hour_fast_judges_run_at_by_redis_clock(skewed: Cluster, tmp_path: Path) -> None:
    """The web process runs under libfaketime one hour ahead. A `runAt` 3 s ahead of Redis's clock (an hour in
    the past by the web host's) is accepted and starts 3 s later, not at once; one past the operation's
    retention by Redis's clock (but within it by the web host's) is a 422 naming `runAt`."""
    library = libfaketime()
    path = os.pathsep.join([str(SHIM), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    port = free_port()
    web = web_process(skewed.settings, tmp_path / "web.log", f"127.0.0.1:{port}", LD_PRELOAD=str(library),
                      FAKETIME="+1h", FAKETIME_DONT_FAKE_MONOTONIC="1", PYTHONPATH=path,
                      TASKS_BACKEND_TOKENS="alice:alice-token")
    skewed.procs.append(web)
    skewed.worker("on-time", concurrency=1)
    url = f"http://127.0.0.1:{port}"
    wait_for_http(f"{url}/readyz", web.popen, web.log_path, 60, "the skewed web process")
    store = skewed.runtime.store
    headers = {"Authorization": "Bearer alice-token"}
    with httpx.Client(base_url=url, headers=headers, timeout=10) as http:
        run_at = store.now_ms() + 3000
        accepted = http.post("/v1/jobs", json={"operation": "test.noop", "params": {}, "runAt": _rfc3339(run_at)})
        assert accepted.status_code == 202, accepted.text
        handle = accepted.json()
        assert handle["status"] == "working" and handle["runAt"] == _rfc3339(run_at), handle
        ttl_ms = int(handle["ttlMs"])
        job_id = handle["taskId"]
        wait_until(lambda: http.get(f"/v1/jobs/{job_id}").json()["status"] == "completed", 30, interval=0.1,
                   message="the delayed job to run")
        started = [e.updated_ms for e in store.events(job_id, "0-0", 0) if e.state is JobState.RUNNING]
        assert started and run_at <= started[0] <= run_at + 2000, (started, run_at)

        too_late = store.now_ms() + ttl_ms + 30 * 60_000  # 30 min past retention by Redis: 30 min within by the web's
        refused = http.post("/v1/jobs", json={"operation": "test.noop", "params": {}, "runAt": _rfc3339(too_late)})
        assert refused.status_code == 422 and "runAt" in refused.json()["errors"], refused.text
        assert refused.headers["Content-Type"] == "application/problem+json"
    stamps = [json.loads(line)["ts"] for line in web.output().splitlines() if line.startswith('{"ts"')]
    latest = max(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() for ts in stamps)
    assert latest > time.time() + 3000, "the web process's clock was not skewed"
