"""The deploy files as shipped: the Procfile's processes started by honcho and driven end to end,
and the compose file parsed and checked (and validated by `docker compose config` where it exists)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tasks_backend import Principal
from tasks_backend.client import Client
from tasks_backend.devtools.embedded import EmbeddedRedis, free_port
from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import build_runtime
from tests.conftest import make_settings, wait_until
from tests.support.procs import alive, service_pids, settings_env, wait_for_http

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
    finished = 'tasks_backend_jobs_finished_total{operation="demo.export",outcome="completed"} 1.0'

    def counted() -> str | None:
        text = httpx.get(f"{system['url']}/metrics", headers={"Authorization": f"Bearer {system['token']}"},
                         timeout=10).text
        return text if finished in text else None

    # Workers write their counts once a second: wait for them rather than read once.
    metrics = wait_until(counted, 15, message="the worker to write its counts")
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
    assert set(services) == APP_SERVICES | {"redis", "rabbitmq", "prometheus", "grafana"}
    commands = {name: services[name]["command"] for name in APP_SERVICES}
    assert commands["web"][:2] == ["tasks-backend", "web"]
    assert commands["worker"][:2] == ["tasks-backend", "worker"]
    assert commands["sweeper"] == ["tasks-backend", "sweeper"]
    assert commands["flower"] == ["tasks-backend", "flower"]
    for name in APP_SERVICES:
        env = services[name]["environment"]
        assert env["REDIS_URL"].startswith("redis://redis:")
        assert env["CELERY_BROKER_URL"].startswith("${CELERY_BROKER_URL:-redis://redis:")  # Redis unless set
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"


def test_compose_rabbitmq_profile_is_the_optional_broker(compose: dict[str, Any]) -> None:
    """RabbitMQ starts only with `--profile rabbitmq`; the app waits for it only when it runs, and uses it
    when CELERY_BROKER_URL says so (Redis otherwise)."""
    rabbitmq = compose["services"]["rabbitmq"]
    assert rabbitmq["profiles"] == ["rabbitmq"] and "ports" not in rabbitmq
    assert any(v.endswith(":/var/lib/rabbitmq") for v in rabbitmq["volumes"])
    for name in APP_SERVICES:
        assert compose["services"][name]["depends_on"]["rabbitmq"]["required"] is False


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


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's `${NAME}` and `${NAME:-default}` (the default when NAME is unset or empty)."""
    def one(match: re.Match[str]) -> str:
        name, default = match[1], match[3] or ""
        return env.get(name) or (default if match[2] else env.get(name, ""))
    return re.sub(r"\$\{([A-Z0-9_]+)(:-([^}]*))?\}", one, value)


def test_compose_publishes_flower_on_loopback_unless_told(compose: dict[str, Any]) -> None:
    """Flower speaks plain HTTP: its port is published on the host's loopback unless FLOWER_ADDRESS says where."""
    (published,) = compose["services"]["flower"]["ports"]
    assert interpolate(published, {}) == "127.0.0.1:5555:5555"
    assert interpolate(published, {"FLOWER_ADDRESS": "", "FLOWER_PORT": "5600"}) == "127.0.0.1:5600:5555"
    assert interpolate(published, {"FLOWER_ADDRESS": "0.0.0.0"}) == "0.0.0.0:5555:5555"
    assert compose["services"]["flower"]["environment"]["FLOWER_ADDRESS"] == "0.0.0.0"  # inside its container


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


# -- a Redis restart under both launchers --------------------------------------------------------
class Launcher:
    """`tasks-backend run` or `honcho start` on the Procfile, with its own queue and key prefix."""

    def __init__(self, name: str, redis_base: str, tmp: Path) -> None:
        self.name, self.token = name, secrets.token_urlsafe(24)
        self.port, self.flower_port = free_port(), free_port()
        venv_bin = str(Path(sys.executable).parent)
        settings = make_settings(redis_base, lease_s=3.0, sweep_interval_s=0.5)
        self.runtime = build_runtime(settings)
        env = settings_env(settings, TASKS_BACKEND_TOKENS=f"ops:{self.token}", FLOWER_PORT=str(self.flower_port),
                          FLOWER_BASIC_AUTH=f"ops:{secrets.token_urlsafe(12)}", PORT=str(self.port),
                          WEB_CONCURRENCY="1", PYTHONUNBUFFERED="1", LOG_FORMAT="text",
                          PATH=f"{venv_bin}{os.pathsep}{os.environ['PATH']}")
        if name == "run":
            argv = [sys.executable, "-m", "tasks_backend.cli", "run", "--data-dir", str(tmp / "unused")]
        else:  # the Procfile's own worker concurrency (2): a free pool slot while a job runs
            argv = [os.path.join(venv_bin, "honcho"), "--no-colour", "-f", str(ROOT / "Procfile"), "start",
                    "-p", str(self.port)]
        self.log = tmp / f"{name}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def ready(self) -> bool:
        assert self.proc.poll() is None, self.tail()
        return _answers(f"{self.url}/readyz") and _answers(f"http://127.0.0.1:{self.flower_port}/healthcheck")

    def services(self) -> dict[str, int]:
        return service_pids(self.proc.pid)

    def submit(self, seconds: float) -> str:
        reply = httpx.post(f"{self.url}/v1/jobs", json={"operation": "demo.sleep", "params": {"seconds": seconds}},
                           headers=self.headers, timeout=10)
        assert reply.status_code == 202, reply.text
        return str(reply.json()["taskId"])

    def status(self, job_id: str) -> str | None:
        try:
            reply = httpx.get(f"{self.url}/v1/jobs/{job_id}", headers=self.headers, timeout=5)
        except httpx.TransportError:
            return None
        return str(reply.json()["status"]) if reply.status_code == 200 else None

    def running(self, job_id: str) -> bool:
        return self.runtime.service.get(Principal("ops"), job_id).state is JobState.RUNNING

    def wait_for(self, job_id: str, timeout: float, what: str) -> None:
        wait_until(lambda: self.status(job_id) == "completed", timeout, interval=0.2, message=f"{self.name}: {what}")

    def tail(self) -> str:
        return f"--- {self.name}\n{self.log.read_text(errors='replace')[-6000:]}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=3).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.chaos
@pytest.mark.timeout(360)
def test_redis_down_for_ten_seconds_leaves_every_process_up(tmp_path: Path) -> None:
    """Redis (AOF on) stops for 10 s with a job running, under `tasks-backend run` and under the Procfile
    at once: a minute after it is back every process is still the one started before, and new jobs run."""
    data = tmp_path / "redis"
    data.mkdir()
    server = EmbeddedRedis(appendonly=True, data_dir=str(data)).start()
    launchers = [Launcher(name, f"redis://127.0.0.1:{server.port}", tmp_path) for name in ("run", "procfile")]
    try:
        for launcher in launchers:
            wait_until(launcher.ready, 120, interval=0.5, message=f"{launcher.name}: web and Flower")
        before = {launcher.name: launcher.services() for launcher in launchers}
        for launcher in launchers:
            assert set(before[launcher.name]) == {"web", "worker", "sweeper", "flower"}, before
        running = {launcher.name: launcher.submit(20) for launcher in launchers}
        for launcher in launchers:
            wait_until(functools.partial(launcher.running, running[launcher.name]), 30, interval=0.2,
                       message=f"{launcher.name}: the job to run")

        server.stop()
        time.sleep(10)  # the outage itself, not a wait for something to happen
        server.start()

        def still_up() -> list[str]:
            return [f"{launcher.name}: {name} (pid {pid})" for launcher in launchers
                    for name, pid in before[launcher.name].items() if not alive(pid)]

        back = time.monotonic()
        while time.monotonic() - back < 60:  # a minute of watching: any exit fails at once
            assert all(launcher.proc.poll() is None for launcher in launchers) and not still_up(), still_up()
            time.sleep(1)
        for launcher in launchers:
            assert launcher.proc.poll() is None, launcher.tail()
            assert launcher.services() == before[launcher.name]
            assert launcher.ready()
            launcher.wait_for(launcher.submit(0.1), 60, "a new job after the restart")
            launcher.wait_for(running[launcher.name], 90, "the job that was running")
        assert "restarting it in" not in launchers[0].log.read_text()  # nothing needed the supervisor
    except BaseException:
        for launcher in launchers:
            print(launcher.tail())
        raise
    finally:
        for launcher in launchers:
            launcher.stop()
        server.stop()


def _settings_read() -> set[str]:
    return set(re.findall(r'"(TASKS_BACKEND_[A-Z_]+)"', (ROOT / "tasks_backend" / "config.py").read_text()))


def test_compose_passes_every_setting_through_and_keeps_a_tokens_file(compose: dict[str, Any]) -> None:
    """A setting set where compose runs reaches every process; a tokens file has a volume to live in."""
    for name in APP_SERVICES:
        service = compose["services"][name]
        assert _settings_read() <= set(service["environment"]), name
        assert "tokens:/etc/tasks-backend" in service["volumes"], name
    assert "tokens" in compose["volumes"]
    assert "/etc/tasks-backend" in (ROOT / "Dockerfile").read_text()


def test_the_configuration_table_names_every_setting() -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("\n## Configuration\n"):]
    table = table[:table.index("\n## ", 1)]
    missing = sorted(n for n in _settings_read() if f"`{n}`" not in table)
    assert not missing, f"README's configuration table does not name {missing}"
