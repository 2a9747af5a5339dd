"""The deployment the remote-task tests run: worker and sweeper processes and the app over real HTTP, which is
also the remote (as bob) when a test makes this project its own remote."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tasks_backend.config import Settings
from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import Runtime, build_runtime
from tests.conftest import ALICE, BOB, JOB_MODULES, Serve, make_settings, wait_until
from tests.support.procs import Proc, print_logs, sweeper_process, worker_process

CREDENTIALS = {"http://127.0.0.1:": "Bearer bob-token"}


class Deployment:
    """Worker and sweeper processes and the app over real HTTP: the local side and, as bob, the remote one."""

    def __init__(self, settings: Settings, tmp: Path, serve: Serve) -> None:
        self.settings, self.tmp = settings, tmp
        self.runtime: Runtime = build_runtime(settings)
        self.url = serve(settings)
        self.http = httpx.Client(base_url=self.url, headers=ALICE, timeout=10)
        self.procs: list[Proc] = []

    def worker(self, name: str, concurrency: int = 2, **env: str) -> Proc:
        env = {"TASKS_BACKEND_PUSH_ALLOW_PRIVATE": "1", "TASKS_BACKEND_REMOTE_CREDENTIALS": json.dumps(CREDENTIALS),
               **env}
        self.procs.append(proc := worker_process(self.settings, self.tmp / f"{name}.log", concurrency=concurrency,
                                                 **env))
        return proc

    def sweeper(self) -> Proc:
        self.procs.append(proc := sweeper_process(self.settings, self.tmp / "sweeper.log",
                                                  TASKS_BACKEND_PUSH_ALLOW_PRIVATE="1"))
        return proc

    def submit(self, operation: str, params: dict[str, Any]) -> str:
        response = self.http.post("/v1/jobs", json={"operation": operation, "params": params})
        assert response.status_code == 202, response.text
        return str(response.json()["taskId"])

    def job(self, job_id: str) -> dict[str, Any]:
        return dict(self.http.get(f"/v1/jobs/{job_id}").json())

    def state(self, job_id: str) -> JobState | None:
        record = self.runtime.store.get(job_id)
        return None if record is None else record.state

    def finished(self, job_id: str, timeout: float = 30) -> dict[str, Any]:
        wait_until(lambda: self.state(job_id) in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED),
                   timeout, interval=0.1, message=f"job {job_id} to finish")
        return self.job(job_id)

    def close(self) -> None:
        for proc in self.procs:
            proc.stop()
        self.http.close()

    def remote_jobs(self) -> list[dict[str, Any]]:
        """Bob's jobs: the ones the remote side made."""
        response = self.http.get("/v1/jobs", headers=BOB, params={"limit": 100})
        assert response.status_code == 200, response.text
        body = response.json()
        return list(body.get("tasks", body.get("jobs", [])))


def remote_settings(redis_base: str, **overrides: Any) -> Settings:
    return make_settings(redis_base, job_modules=(*JOB_MODULES, "tests.support.remote_jobs"),
                         push_allow_private=True, remote_credentials=tuple(CREDENTIALS.items()),
                         lease_s=1.5, queued_grace_s=1.0, sweep_interval_s=0.2, **overrides)


@pytest.fixture
def deployment(redis_base: str, tmp_path: Path, serve: Serve) -> Iterator[Deployment]:
    d = Deployment(remote_settings(redis_base), tmp_path, serve)
    try:
        yield d
    finally:
        if any(proc.alive() for proc in d.procs):
            print_logs(d.procs)  # shown by pytest when the test failed
        d.close()
