"""Redis Sentinel as store and broker, with real processes: the primary is SIGKILLed and a replica promoted.

The web (gunicorn), the workers, the sweeper and Flower find the primary through the Sentinels. The
killed primary is started again once the replica took over, as its supervisor would; the Sentinels make
it a replica of the new primary, which a submit that waits for one replica (`WAIT 1`) needs."""

from __future__ import annotations

import secrets
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tasks_backend import Principal
from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import free_port
from tasks_backend.errors import StoreUnavailable
from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import Runtime, build_runtime
from tests.conftest import make_settings, wait_until
from tests.support.procs import Proc, print_logs, settings_env, sweeper_process, wait_for_http, worker_process
from tests.support.sentinel import SERVICE, SentinelGroup

pytestmark = pytest.mark.chaos
ALICE = Principal("alice")


def sentinel_settings(group: SentinelGroup, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"redis_service": SERVICE, "submit_replicas": 1, "submit_replicas_timeout_s": 0.5,
                              "lease_s": 1.5, "queued_grace_s": 1.0, "sweep_interval_s": 0.2,
                              "visibility_timeout_s": 30.0}
    values.update(overrides)
    return make_settings("unused", redis_url=group.url(), **values)


def submit(rt: Runtime, timeout: float = 30) -> str:
    """Submit as a caller would: retry a 503 until it is accepted."""
    def accepted() -> str | None:
        try:
            return rt.service.submit(ALICE, "test.noop")[0].id
        except StoreUnavailable:
            return None

    return str(wait_until(accepted, timeout, interval=0.1, message="a submit to be accepted"))


def completed(rt: Runtime, job_id: str) -> bool:
    try:
        return rt.service.get(ALICE, job_id).state is JobState.COMPLETED
    except StoreUnavailable:
        return False


def fail_over(group: SentinelGroup) -> tuple[int, int]:
    """SIGKILL the primary, wait for the promotion, start the old one again; (old port, new port)."""
    old = group.kill_primary()
    new = group.wait_promoted(old)
    group.server_on(old).start()
    wait_until(lambda: group.server_on(new).replicas_online() == 1, 30, message="the old primary to replicate")
    return old, new


def test_a_worker_waiting_on_the_broker_survives_its_primary_being_killed(sentinel_group: SentinelGroup,
                                                                          tmp_path: Path) -> None:
    """With a free pool slot the worker's main loop waits in BRPOP when the primary dies: it reconnects
    (through the Sentinels, to the promoted replica) and takes new work instead of shutting down. Its
    transport is workers/broker.py's (the close that crashes kombu's: tests/workers/test_broker.py)."""
    settings = sentinel_settings(sentinel_group)
    rt = build_runtime(settings)
    worker = worker_process(settings, tmp_path / "worker.log", concurrency=2)
    sweeper = sweeper_process(settings, tmp_path / "sweeper.log")
    try:
        first = submit(rt)
        wait_until(lambda: completed(rt, first), 60, message="a job to run before the failover")
        fail_over(sentinel_group)
        after = submit(rt)
        wait_until(lambda: completed(rt, after), 60, message="a job to run after the failover")
        assert worker.alive() and sweeper.alive()
        assert "Unrecoverable error" not in worker.output()
    except BaseException:
        print(worker.output()[-4000:], sweeper.output()[-2000:])
        raise
    finally:
        worker.stop()
        sweeper.stop()


class Load:
    """Callers submitting over HTTP as fast as they are answered, each submit with its own idempotency
    key, retried on 503 (after its Retry-After, capped short) or a cut connection until accepted."""

    def __init__(self, base_url: str, threads: int = 4) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=10, headers={"Authorization": "Bearer alice-token"})
        self.lock = threading.Lock()
        self.accepted: dict[str, str] = {}  # idempotency key -> taskId
        self.unavailable = 0  # 503 with Retry-After
        self.errors: list[str] = []  # any other failure
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)
        self.http.close()

    def count(self) -> int:
        with self.lock:
            return len(self.accepted)

    def _run(self) -> None:
        while not self.stop.is_set():
            key = str(uuid.uuid4())
            while not self.stop.is_set():
                try:
                    answer = self.http.post("/v1/jobs", json={"operation": "test.noop"},
                                            headers={"Idempotency-Key": key})
                except httpx.TransportError:
                    self.stop.wait(0.05)
                    continue
                if answer.status_code == 202:
                    with self.lock:
                        self.accepted[key] = answer.json()["taskId"]
                    break
                with self.lock:
                    if answer.status_code == 503 and answer.headers.get("Retry-After"):
                        self.unavailable += 1
                    else:
                        self.errors.append(f"{answer.status_code} {answer.text[:200]}")
                # A caller's back-off before its retry (Retry-After says 2 s; shorter keeps the test quick).
                self.stop.wait(min(float(answer.headers.get("Retry-After") or 0.1), 0.2))


@pytest.fixture
def flower_proc(sentinel_group: SentinelGroup, tmp_path: Path) -> Iterator[dict[str, Any]]:
    settings = sentinel_settings(sentinel_group)
    port, password = free_port(), secrets.token_urlsafe(12)
    log_path = tmp_path / "flower.log"
    env = settings_env(settings, FLOWER_PORT=str(port), FLOWER_BASIC_AUTH=f"ops:{password}")
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tasks_backend.cli", "flower"], env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_http(f"{url}/healthcheck", proc, log_path, 60, "Flower to start")
        yield {"url": url, "auth": ("ops", password), "settings": settings}
    finally:
        proc.terminate()
        proc.wait(20)


def test_the_primary_killed_under_load_loses_no_accepted_job(sentinel_group: SentinelGroup, tmp_path: Path,
                                                             flower_proc: dict[str, Any]) -> None:
    """Submits keep coming over HTTP while the primary is SIGKILLed: the API answers 503 + Retry-After
    during the switch and recovers by itself; workers and the sweeper carry on with the new primary
    (the same processes: none restarted); every submit answered 202 ends completed."""
    settings: Settings = flower_proc["settings"]
    rt = build_runtime(settings)
    port = free_port()
    web = Proc([sys.executable, "-m", "tasks_backend.cli", "web", "--workers", "2", "--bind", f"127.0.0.1:{port}"],
               settings_env(settings, TASKS_BACKEND_TOKENS=settings.tokens or ""), tmp_path / "web.log")
    procs = [web, *(worker_process(settings, tmp_path / f"worker{i}.log", concurrency=2) for i in (1, 2)),
             sweeper_process(settings, tmp_path / "sweeper.log")]
    try:
        wait_for_http(f"http://127.0.0.1:{port}/readyz", web.popen, web.log_path, 60, "the web process")
        with Load(f"http://127.0.0.1:{port}") as load:
            wait_until(lambda: load.count() >= 30, 60, message="submits before the failover")
            at_kill = load.count()
            old, new = fail_over(sentinel_group)
            wait_until(lambda: load.count() >= at_kill + 60, 60, message="submits after the failover")
        assert load.unavailable > 0, "no 503 seen: the primary was not missed"
        assert not load.errors, load.errors[:5]

        ids = list(load.accepted.values())
        assert len(set(ids)) == len(ids)

        def unfinished() -> list[str]:
            records = rt.store.get_many(ids)
            return [i for i, r in zip(ids, records, strict=True) if r is None or r.state is not JobState.COMPLETED]

        started = time.monotonic()
        wait_until(lambda: not unfinished(), 90, interval=0.2,
                   message=f"every accepted job to complete ({len(ids)} accepted)")
        print(f"{len(ids)} accepted, {load.unavailable} answers 503, all completed "
              f"{time.monotonic() - started:.1f}s after the load stopped; primary {old} -> {new}")
        assert all(p.alive() for p in procs), [p.log_path.name for p in procs if not p.alive()]
        # Flower reads queue lengths from the broker's primary through the Sentinels too.
        queues = httpx.get(f"{flower_proc['url']}/api/queues/length", auth=flower_proc["auth"], timeout=10)
        assert queues.status_code == 200 and settings.queue in queues.text, queues.text
    except BaseException:
        print_logs(procs)
        raise
    finally:
        for proc in procs:
            proc.stop()
