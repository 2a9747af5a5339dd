"""The deploy files as shipped: the Procfile's processes started by honcho and driven end to end,
and the compose file parsed and checked (and validated by `docker compose config` where it exists)."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tasks_backend.client import Client
from tasks_backend.embedded import free_port
from tests.conftest import make_settings, wait_until
from tests.support.procs import settings_env, wait_for_http

ROOT = Path(__file__).resolve().parent.parent
APP_SERVICES = {"web", "worker", "sweeper", "flower"}


def procfile() -> dict[str, str]:
    out = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        name, sep, command = line.partition(":")
        if sep and not line.startswith("#"):
            out[name.strip()] = command.strip()
    return out


def test_procfile_names_every_process() -> None:
    processes = procfile()
    assert set(processes) == {"web", "worker", "beat", "flower"}
    assert processes["beat"] == "tasks-backend sweeper"


@pytest.fixture(scope="module")
def procfile_system(redis_base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """`honcho start` on the real Procfile, against the test Redis, with its own queue and key prefix."""
    settings = make_settings(redis_base)
    token = secrets.token_urlsafe(24)
    flower_password = secrets.token_urlsafe(12)
    port, flower_port = free_port(), free_port()
    venv_bin = str(Path(sys.executable).parent)
    env = settings_env(settings, TASKS_BACKEND_TOKENS=f"deployer:{token}", FLOWER_PORT=str(flower_port),
                      FLOWER_BASIC_AUTH=f"ops:{flower_password}", WEB_CONCURRENCY="1", WORKER_CONCURRENCY="1",
                      TASKS_BACKEND_SWEEP_INTERVAL="0.5", PATH=f"{venv_bin}{os.pathsep}{os.environ['PATH']}",
                      PYTHONUNBUFFERED="1")
    log_path = tmp_path_factory.mktemp("procfile") / "honcho.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([os.path.join(venv_bin, "honcho"), "--no-colour", "-f", str(ROOT / "Procfile"),
                                 "start", "-p", str(port)], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    try:
        wait_for_http(f"{url}/readyz", proc, log_path, 90, "the Procfile's web process")
        yield {"url": url, "token": token, "flower": f"http://127.0.0.1:{flower_port}",
               "flower_auth": ("ops", flower_password), "log": log_path}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(45)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def test_procfile_processes_serve_a_job(procfile_system: dict[str, Any]) -> None:
    system = procfile_system
    with Client(system["url"], system["token"]) as tasks:
        job = tasks.submit("demo.export", {"rows": 4})
        assert tasks.result(job, timeout=90)["rows"] == 4
        refund = tasks.submit("demo.refund", {"order_id": "P-1", "amount": 3})
        assert tasks.wait(refund.id, timeout=90).status == "input_required"
        metrics = httpx.get(f"{system['url']}/metrics", headers={"Authorization": f"Bearer {system['token']}"},
                            timeout=10).text
    assert 'tasks_backend_jobs_finished_total{operation="demo.export",outcome="completed"} 1.0' in metrics
    assert "tasks_backend_jobs_parked 1.0" in metrics
    assert re.search(r'tasks_backend_queue_depth\{queue="[^"]+"\} 0\.0', metrics)

    flower = system["flower"]
    wait_until(lambda: _flower_up(flower), 60, interval=0.3, message="the Procfile's flower process")
    assert httpx.get(f"{flower}/api/tasks", timeout=10).status_code == 401
    assert httpx.get(f"{flower}/api/workers", auth=system["flower_auth"], timeout=10).status_code == 200

    lines = [line.split("|", 1)[-1].strip() for line in system["log"].read_text().splitlines()]
    worker_json = [json.loads(line) for line in lines if line.startswith('{"ts"') and '"taskId"' in line]
    assert any(entry.get("taskId") == job.id and entry.get("operation") == "demo.export" for entry in worker_json)
    assert "P-1" not in system["log"].read_text()  # params never reach a log line


def _flower_up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthcheck", timeout=3).status_code == 200
    except httpx.TransportError:
        return False


def test_no_secret_in_the_procfile_logs(procfile_system: dict[str, Any]) -> None:
    text = procfile_system["log"].read_text()
    assert procfile_system["token"] not in text
    assert procfile_system["flower_auth"][1] not in text


# -- docker compose ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


def test_compose_runs_every_process_with_redis(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == APP_SERVICES | {"redis"}
    commands = {name: services[name]["command"] for name in APP_SERVICES}
    assert commands["web"][:2] == ["tasks-backend", "web"]
    assert commands["worker"][:2] == ["tasks-backend", "worker"]
    assert commands["sweeper"] == ["tasks-backend", "sweeper"]
    assert commands["flower"] == ["tasks-backend", "flower"]
    for name in APP_SERVICES:
        env = services[name]["environment"]
        assert env["REDIS_URL"].startswith("redis://redis:")
        assert env["CELERY_BROKER_URL"].startswith("redis://redis:")
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"


def test_compose_redis_is_durable_and_never_evicts(compose: dict[str, Any]) -> None:
    redis = compose["services"]["redis"]
    args = redis["command"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    assert any(volume.endswith(":/data") for volume in redis["volumes"])


def test_compose_has_healthchecks_restart_policies_and_flower_auth(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        assert service.get("restart") in ("unless-stopped", "always"), name
        assert service["healthcheck"]["test"], name
    assert "/readyz" in " ".join(compose["services"]["web"]["healthcheck"]["test"])
    assert "?" in compose["services"]["flower"]["environment"]["FLOWER_BASIC_AUTH"]  # required, no default


def test_the_image_has_what_it_installs() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for line in dockerfile.splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), source
    assert 'CMD ["tasks-backend"' in dockerfile


@pytest.mark.skipif(not shutil.which("docker") or subprocess.run(["docker", "compose", "version"],
                    capture_output=True).returncode != 0, reason="docker compose is not installed")
def test_docker_compose_accepts_the_file() -> None:
    env = {**os.environ, "FLOWER_BASIC_AUTH": "ops:secret", "TASKS_BACKEND_TOKENS": "me:token"}
    proc = subprocess.run(["docker", "compose", "-f", str(ROOT / "docker-compose.yml"), "config", "--quiet"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
