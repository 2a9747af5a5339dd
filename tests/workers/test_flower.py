"""Flower as operators run it (`tasks-backend flower`, a real process) watching the real worker."""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tasks_backend.access.auth import Principal
from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import free_port
from tasks_backend.model.domain import JobState
from tasks_backend.model.states import CELERY_STATES
from tasks_backend.service.runtime import Runtime
from tests.conftest import wait_until
from tests.support.procs import settings_env, wait_for_http
from workers.flower import celery_outcome, describe_progress, flower_argv

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def flower(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    port = free_port()
    password = secrets.token_urlsafe(12)
    log_path = tmp_path_factory.mktemp("flower") / "flower.log"
    env = settings_env(settings, FLOWER_PORT=str(port), FLOWER_BASIC_AUTH=f"ops:{password}")
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tasks_backend.cli", "flower"],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    try:
        wait_for_http(f"{url}/healthcheck", proc, log_path, 60, "Flower to start")
        yield {"url": url, "auth": ("ops", password), "log": log_path, "password": password}
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_flower_refuses_without_credentials(flower: dict[str, Any]) -> None:
    for path in ("/", "/api/tasks", "/api/workers", "/metrics"):
        response = httpx.get(flower["url"] + path, timeout=10)
        assert response.status_code == 401, path
    wrong = httpx.get(flower["url"] + "/api/tasks", auth=("ops", "wrong"), timeout=10)
    assert wrong.status_code == 401


def test_flower_lists_a_finished_job_under_its_operation_name(worker: Any, runtime: Runtime,
                                                             flower: dict[str, Any]) -> None:
    principal = Principal("flower-viewer")
    seen: dict[str, Any] = {}

    def listed() -> bool:
        # Flower only sees events sent after it subscribed, so keep submitting until one is listed.
        record, _ = runtime.service.submit(principal, "demo.export", {"rows": 2})
        done = runtime.service.wait(principal, record.id, 30)
        assert done.terminal
        tasks = httpx.get(flower["url"] + "/api/tasks", params={"taskname": "demo.export"},
                          auth=flower["auth"], timeout=10).json()
        for task_id, task in tasks.items():
            if task.get("state") == "SUCCESS":
                seen.update(task, uuid=task_id)
                return True
        return False

    wait_until(listed, 90, interval=0.5, message="Flower to list a finished demo.export job")
    assert seen["name"] == "demo.export"
    assert runtime.service.get(principal, seen["uuid"]).state.value == "completed"
    assert "demo.export" in seen["args"] and "rows" not in seen["args"]  # ids only: params stay in Redis
    page = httpx.get(f"{flower['url']}/task/{seen['uuid']}", auth=flower["auth"], timeout=10)
    assert page.status_code == 200 and "demo.export" in page.text


def _flower_task(flower: dict[str, Any], job_id: str, states: tuple[str, ...]) -> dict[str, Any] | None:
    for _ in range(50):  # the worker's last event may trail the record by a moment
        task = httpx.get(f"{flower['url']}/api/task/info/{job_id}", auth=flower["auth"], timeout=10)
        info = task.json() if task.status_code == 200 else {}
        if info.get("state") in states:
            return dict(info)
        time.sleep(0.1)
    return None


def test_a_failed_job_shows_as_failure_with_its_own_message(worker: Any, runtime: Runtime,
                                                             flower: dict[str, Any]) -> None:
    principal = Principal("flower-viewer")

    def final() -> dict[str, Any] | None:
        record, _ = runtime.service.submit(principal, "demo.fail", {"message": "the disk is full"})
        assert runtime.service.wait(principal, record.id, 30).state is JobState.FAILED
        return _flower_task(flower, record.id, ("FAILURE", "SUCCESS"))

    task = wait_until(final, 90, interval=0.5, message="Flower to see a job end")
    assert task["state"] == "FAILURE"
    assert "the disk is full" in task["exception"]
    assert celery_outcome("completed", lambda: None, lambda: None) == "completed"
    assert CELERY_STATES[JobState.FAILED] == ("FAILURE",)


def test_a_job_cancelled_while_running_shows_as_revoked(worker: Any, runtime: Runtime,
                                                        flower: dict[str, Any]) -> None:
    principal = Principal("flower-viewer")

    def final() -> dict[str, Any] | None:
        record, _ = runtime.service.submit(principal, "demo.sleep", {"seconds": 20, "steps": 200})
        wait_until(lambda: runtime.service.get(principal, record.id).state is JobState.RUNNING, 30,
                   message="the job to run")
        runtime.service.cancel(principal, record.id)
        # The worker reports when it stops, at its next cancellation point.
        return _flower_task(flower, record.id, ("REVOKED", "SUCCESS", "FAILURE"))

    task = wait_until(final, 90, interval=0.5, message="Flower to see a cancelled job end")
    assert task["state"] == "REVOKED"
    assert CELERY_STATES[JobState.CANCELLED] == ("REVOKED",)


def test_a_running_job_shows_its_progress(worker: Any, runtime: Runtime, flower: dict[str, Any]) -> None:
    principal = Principal("flower-viewer")
    jobs: list[str] = []

    def shown() -> bool:
        record, _ = runtime.service.submit(principal, "demo.sleep", {"seconds": 30, "steps": 300})
        jobs.append(record.id)
        wait_until(lambda: runtime.service.get(principal, record.id).progress is not None, 30,
                   message="the job to report progress")
        try:
            for _ in range(50):  # Flower sees the job start once the worker's event reaches it
                page = httpx.get(f"{flower['url']}/task/{record.id}", auth=flower["auth"], timeout=10)
                if page.status_code == 200 and re.search(r"\d+/300 slept [\d.]+s of 30s", page.text):
                    return True
                time.sleep(0.1)
            return False
        finally:
            runtime.service.cancel(principal, record.id)

    wait_until(shown, 90, interval=0.5, message="Flower to show a running job's progress")
    assert describe_progress(runtime.store.get(jobs[-1])) is not None


def test_flower_logs_carry_no_secret(flower: dict[str, Any]) -> None:
    text = Path(flower["log"]).read_text()
    assert flower["password"] not in text


def test_flower_metrics_answer_with_credentials(flower: dict[str, Any]) -> None:
    response = httpx.get(flower["url"] + "/metrics", auth=flower["auth"], timeout=10)
    assert response.status_code == 200 and "flower_" in response.text


def test_flower_listens_on_loopback_unless_told_otherwise() -> None:
    assert "--address=127.0.0.1" in flower_argv({})
    assert "--address=0.0.0.0" in flower_argv({"FLOWER_ADDRESS": "0.0.0.0"})
    assert flower_argv({"FLOWER_PORT": "6000", "FLOWER_BASIC_AUTH": "ops:pw"}, ["--address=::1"])[-1] == "--address=::1"
