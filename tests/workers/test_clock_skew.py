"""A worker whose clock runs 40 s behind the sweeper's, as separate processes: Redis is the one clock.

The worker runs under libfaketime (Debian's `libfaketime` package), so every host-clock reading in its
processes is 40 s late; its monotonic clock is left alone (timeouts, sleeps). Leases it writes must
still read as live to a sweeper with a correct clock: no job is requeued, rerun or failed `WorkerLost`.
(`tests/support/faketime` works around a libfaketime bug with Python's `time.sleep`.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tasks_backend import Principal
from tasks_backend.model.domain import JobState
from tests.conftest import make_settings, wait_until
from tests.support.procs import ROOT
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
def skewed(redis_base: str, tmp_path: Path) -> Iterator[Cluster]:
    settings = make_settings(redis_base, lease_s=1.5, queued_grace_s=1.0, sweep_interval_s=0.2,
                             visibility_timeout_s=30.0)
    cluster = Cluster(settings, tmp_path)
    try:
        yield cluster
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()


def test_a_worker_40s_behind_keeps_its_leases_and_runs_each_job_once(skewed: Cluster, tmp_path: Path) -> None:
    library = libfaketime()
    started = time.time()
    path = os.pathsep.join([str(SHIM), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    worker = skewed.worker("late", concurrency=3, LD_PRELOAD=str(library), FAKETIME="-40s",
                           FAKETIME_DONT_FAKE_MONOTONIC="1", PYTHONPATH=path)
    skewed.sweeper()
    service, store = skewed.runtime.service, skewed.runtime.store
    jobs: list[tuple[str, Path, Path]] = []
    for n in range(3):
        ledger, gate = tmp_path / f"ledger{n}", tmp_path / f"gate{n}"
        record, _ = service.submit(ALICE, "test.steps", {"ledger": str(ledger), "steps": 3, "gate": str(gate)})
        jobs.append((record.id, ledger, gate))
    for job_id, ledger, _ in jobs:
        wait_until(lambda ledger=ledger: effects(ledger) == [0], 30, message=f"job {job_id} to start")

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
    stamps = [json.loads(line)["ts"] for line in worker.output().splitlines() if line.startswith('{"ts"')]
    earliest = min(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() for ts in stamps)
    assert earliest < started - 30, "the worker's clock was not skewed"
    assert "WorkerLost" not in worker.output()
