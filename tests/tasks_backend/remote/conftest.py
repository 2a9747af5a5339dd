"""The deployment the remote-task tests run: worker and sweeper processes and the app over real HTTP, which is
also the remote (as bob) when a test makes this project its own remote."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tasks_backend.config import Settings
from tests.conftest import BOB, JOB_MODULES, Serve, make_settings, show_logs_on_failure
from tests.support.deployment import Deployment
from tests.support.procs import tails

CREDENTIALS = {"http://127.0.0.1:": "Bearer bob-token"}


class RemoteDeployment(Deployment):
    """A deployment whose processes may reach this host and carry the remotes' credentials: the local side and,
    as bob, the remote one."""

    def __init__(self, settings: Settings, tmp: Path, serve: Serve) -> None:
        super().__init__(settings, tmp, serve, env={"TASKS_BACKEND_PUSH_ALLOW_PRIVATE": "1",
                                                     "TASKS_BACKEND_REMOTE_CREDENTIALS": json.dumps(CREDENTIALS)})

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
def deployment(redis_base: str, tmp_path: Path, serve: Serve,
               request: pytest.FixtureRequest) -> Iterator[RemoteDeployment]:
    d = RemoteDeployment(remote_settings(redis_base), tmp_path, serve)
    show_logs_on_failure(request, lambda: tails(d.procs))
    try:
        yield d
    finally:
        d.close()
