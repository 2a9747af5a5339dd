"""`Deployment`: worker and sweeper processes of a test's own, its app over real HTTP (as alice), and a runtime to
look at the store with; `close` stops the processes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from tasks_backend.config import Settings
from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import Runtime, build_runtime
from tests.conftest import ALICE, wait_until
from tests.support.procs import Proc, print_logs, sweeper_process, worker_process

FINISHED = (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)


class Deployment:
    def __init__(self, settings: Settings, tmp: Path, serve: Callable[[Settings], str],
                 env: Mapping[str, str] | None = None) -> None:
        self.settings, self.tmp = settings, tmp
        #: What every process of this deployment is started with, beside the settings.
        self.env = dict(env or {})
        self.runtime: Runtime = build_runtime(settings)
        self.url = serve(settings)
        self.http = httpx.Client(base_url=self.url, headers=ALICE, timeout=10)
        self.procs: list[Proc] = []

    def worker(self, name: str, concurrency: int = 2, **env: str) -> Proc:
        self.procs.append(proc := worker_process(self.settings, self.tmp / f"{name}.log", concurrency=concurrency,
                                                 **{**self.env, **env}))
        return proc

    def sweeper(self) -> Proc:
        self.procs.append(proc := sweeper_process(self.settings, self.tmp / "sweeper.log", **self.env))
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
        wait_until(lambda: self.state(job_id) in FINISHED, timeout, interval=0.1, message=f"job {job_id} to finish")
        return self.job(job_id)

    def close(self, *, show_logs: bool = False) -> None:
        """Stop every process (their logs printed first with `show_logs`: pytest shows them when a test failed)."""
        if show_logs:
            print_logs(self.procs)
        for proc in self.procs:
            proc.stop()
        self.http.close()
