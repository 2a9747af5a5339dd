"""A bulk rerun of 500 failed jobs through a worker SIGKILL and a web restart, with separate worker, sweeper and web
processes: every failed job is rerun exactly once, and the bulk job's result says so.

The workers reach Redis through a relay that delays each request (`LaggyRelay`), so that the bulk job is still
going when its worker is killed."""

from __future__ import annotations

import collections
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tasks_backend import Principal
from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import free_port
from tasks_backend.model.domain import JobRecord, JobState
from tasks_backend.service.filters import JobFilter
from tasks_backend.service.runtime import build_runtime
from tests.conftest import make_settings, show_logs_on_failure, single_redis, wait_until
from tests.support.lag import LaggyRelay
from tests.support.procs import Proc, sweeper_process, tails, wait_for_http, web_process, worker_process

pytestmark = pytest.mark.chaos
ALICE = Principal("alice")
TOKENS = {"TASKS_BACKEND_TOKENS": "alice:alice-token"}
AUTH = {"Authorization": "Bearer alice-token"}
JOBS = 500


class Web:
    """`tasks-backend web` on a port of its own, started again on the same port after a kill."""

    def __init__(self, settings: Settings, tmp: Path) -> None:
        self.settings, self.tmp, self.port, self.proc, self.starts = settings, tmp, free_port(), None, 0
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.starts += 1
        log = self.tmp / f"web{self.starts}.log"
        self.proc = web_process(self.settings, log, f"127.0.0.1:{self.port}", **TOKENS)
        wait_for_http(f"{self.url}/healthz", self.proc.popen, log, 60, "tasks-backend web")


@pytest.fixture
def procs(request: pytest.FixtureRequest) -> Iterator[list[Proc]]:
    started: list[Proc] = []
    show_logs_on_failure(request, lambda: tails(started))
    try:
        yield started
    finally:
        for p in started:  # the test is over: nothing is left to hand back, so no graceful stop is waited for
            p.kill_group(signal.SIGKILL)
            p.stop()


def test_a_bulk_rerun_survives_a_worker_sigkill_and_a_web_restart_and_reruns_each_once(
        redis_base: str, tmp_path: Path, procs: list[Proc]) -> None:
    settings = make_settings(single_redis(redis_base), lease_s=1.5, queued_grace_s=1.0, sweep_interval_s=0.2)
    url = urlsplit(settings.redis_url)
    relay = LaggyRelay((url.hostname or "127.0.0.1", url.port or 6379), 0.002)
    laggy = settings.with_(redis_url=f"redis://127.0.0.1:{relay.port}{url.path}")
    runtime = build_runtime(settings)
    ledger, switch = tmp_path / "ledger", tmp_path / "switch"

    first = worker_process(laggy, tmp_path / "w1.log", concurrency=4)
    procs += [first, sweeper_process(settings, tmp_path / "sweeper.log")]
    web = Web(settings, tmp_path)
    web.start()
    assert web.proc is not None
    procs.append(web.proc)

    originals = [runtime.service.submit(ALICE, "test.fails_until", {"ledger": str(ledger), "switch": str(switch),
                                                                   "key": i})[0].id for i in range(JOBS)]
    failed = JobFilter(states=frozenset({JobState.FAILED}), operation="test.fails_until")
    wait_until(lambda: len(runtime.service.matching_ids(ALICE, failed, JOBS + 1)) == JOBS, 60,
               message=f"{JOBS} jobs to fail")
    switch.touch()

    with httpx.Client(base_url=web.url, timeout=10, headers=AUTH) as http:
        response = http.post("/v1/jobs/bulk", json={"action": "rerun",
                                                    "filter": {"status": "failed", "operation": "test.fails_until"}})
        assert response.status_code == 202, response.text
        bulk_id = response.json()["taskId"]

        def progress() -> float:
            return float((http.get(f"/v1/jobs/{bulk_id}").json().get("progress") or {}).get("done") or 0)

        wait_until(lambda: progress() >= 50, 30, message="the bulk job to rerun its first batches")
        first.kill_group(signal.SIGKILL)
        done_at_kill = progress()
        assert done_at_kill < JOBS, "the bulk job finished before its worker was killed"
    web.proc.kill_group(signal.SIGKILL)
    web.proc.popen.wait(10)
    web.start()
    procs.append(web.proc)
    procs.append(worker_process(laggy, tmp_path / "w2.log", concurrency=4))

    with httpx.Client(base_url=web.url, timeout=10, headers=AUTH) as http:
        def finished() -> dict[str, Any] | None:
            body = http.get(f"/v1/jobs/{bulk_id}").json()
            return body if body["status"] in ("completed", "failed", "cancelled") else None

        bulk = wait_until(finished, 60, message="the bulk job to finish on the new worker")
    assert bulk["status"] == "completed", bulk
    result = bulk["result"]
    assert result["matched"] == result["done"] == JOBS and result["skipped"] == 0, {
        k: v for k, v in result.items() if not isinstance(v, list)}
    assert sorted(result["ids"]) == sorted(originals) and len(set(result["newIds"])) == JOBS
    # Exactly one rerun of each original exists (the killed batch's replay answered the same new jobs).
    reruns: list[JobRecord] = []
    cursor: str | None = None
    while True:
        page, cursor = runtime.service.find(ALICE, JobFilter(operation="test.fails_until"), limit=200, cursor=cursor)
        reruns += [r for r in page if r.rerun_of is not None]
        if cursor is None:
            break
    per_original = collections.Counter(r.rerun_of for r in reruns)
    assert set(per_original) == set(originals) and set(per_original.values()) == {1}
    assert sorted(r.id for r in reruns) == sorted(result["newIds"])
    relay.close()
