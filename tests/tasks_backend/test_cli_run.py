"""`tasks-backend run` (what `make run` calls): the whole system from nothing, served end to end."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from tasks_backend.embedded import free_port
from tests.conftest import wait_until
from tests.support.procs import ROOT, service_pids


def test_run_serves_a_demo_job_with_an_embedded_redis(tmp_path: Path) -> None:
    """... and keeps serving when a process dies, the embedded Redis included; SIGTERM stops them all."""
    port, flower_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TASKS_BACKEND_", "FLOWER_", "REDIS_URL", "CELERY_BROKER_URL"))}
    env.update({"PORT": str(port), "FLOWER_PORT": str(flower_port), "LOG_FORMAT": "text"})
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cli", "run", "--data-dir",
                                 str(tmp_path / "data")], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        token = wait_until(lambda: (m := re.search(r"export TASKS_BACKEND_TOKEN=(\S+)", log.read_text()))
                           and m.group(1), 60, message="the banner with a development token")
        base = f"http://127.0.0.1:{port}"
        # The banner comes once every child answers, so the web app serves at once, and it is not buried in
        # what only a deployment's operators need: Celery's banner, its root warning, Flower's inspect failures.
        assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200
        text = log.read_text()
        assert text.count("tasks-backend is ready on") == 1
        assert f"  export TASKS_BACKEND_URL={base}\n" in text
        assert re.search(r"\n  export REDIS_URL=redis://127\.0\.0\.1:\d+/0\n", text)
        assert re.search(r"\n  source \S+/bin/activate\n", text)
        for noise in ("-------------- celery@", "SecurityWarning", "Inspect method"):
            assert noise not in text
        headers = {"Authorization": f"Bearer {token}"}
        job = httpx.post(f"{base}/v1/jobs", json={"operation": "demo.sleep", "params": {"seconds": 0.2}},
                         headers=headers, timeout=10)
        assert job.status_code == 202
        location = base + job.headers["Location"]
        wait_until(lambda: httpx.get(location, headers=headers, timeout=5).json()["status"] == "completed", 60,
                   interval=0.2, message="the demo job to complete")
        assert httpx.get(location + "/result", headers=headers, timeout=5).json() == {"slept": 0.2}
        assert httpx.get(f"http://127.0.0.1:{flower_port}/api/tasks", timeout=5).status_code == 401

        # A child that dies is started again, the embedded Redis too: on its port, with its data (AOF).
        aof = tmp_path / "data" / "redis"
        wait_until(lambda: any(location.rsplit("/", 1)[-1].encode() in f.read_bytes() for f in aof.rglob("*.aof*")),
                   10, message="the job in the AOF")
        for name in ("worker", "redis"):
            pid = service_pids(proc.pid)[name]
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda name=name, pid=pid: re.search(
                rf"{name} \(pid {pid}\) exited with signal SIGKILL after [\d.]+s; restarting it in 1s.*\n"
                rf"(.*\n)*.*{name} restarted \(pid \d+", log.read_text()), 30, message=f"{name} to be restarted")
            wait_until(lambda: _get(location, headers) == "completed", 30, message="the job, still there")
            again = httpx.post(f"{base}/v1/jobs", json={"operation": "demo.sleep", "params": {"seconds": 0}},
                               headers=headers, timeout=10).headers["Location"]
            wait_until(lambda again=again: _get(base + again, headers) == "completed", 60, interval=0.2,
                       message=f"a new job after {name} was restarted")
    finally:
        proc.send_signal(signal.SIGTERM)  # as Ctrl-C would: the supervisor stops everything it started
        try:
            proc.wait(60)
        finally:
            leftovers = _group_alive(proc.pid)
            if leftovers:
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, log.read_text()[-3000:]
    assert not leftovers, "processes outlived `tasks-backend run`"
    assert (tmp_path / "data" / "redis").is_dir()


def test_run_refuses_a_port_in_use(tmp_path: Path) -> None:
    """A taken port is named before anything starts (no token, no Redis), and the exit status says so."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKS_BACKEND_", "REDIS_URL"))}
        env.update({"PORT": str(port), "FLOWER_PORT": str(free_port())})
        done = subprocess.run([sys.executable, "-m", "cli", "run", "--data-dir", str(tmp_path / "data")], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert re.fullmatch(rf"port {port} is in use; set PORT=<a free port> \(for example PORT=\d+\)\n", done.stderr)
    assert done.stdout == ""
    assert not (tmp_path / "data").exists()


def _get(url: str, headers: dict[str, str]) -> str | None:
    try:
        reply = httpx.get(url, headers=headers, timeout=5)
    except httpx.TransportError:
        return None
    return str(reply.json()["status"]) if reply.status_code == 200 else None


def _group_alive(pgid: int) -> bool:
    def gone() -> bool:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        return False

    try:
        wait_until(gone, 30, interval=0.1, message="the process group to exit")
    except AssertionError:
        return True
    return False


def test_the_pasted_block_exports_a_token_only_when_there_is_one_to_paste() -> None:
    from cli.run import Banner, _first_token

    assert _first_token("ops:s3cret, me:other") == "s3cret"
    assert _first_token("") is None
    common = {"port": "8000", "flower_port": "5555", "flower_auth": "admin:pw",
              "redis_url": "redis://127.0.0.1:6379/0", "embedded": False}
    shown = Banner(token="s3cret", **common).render(1.0)
    assert "\n  export TASKS_BACKEND_TOKEN=s3cret\n" in shown
    assert "\n  export REDIS_URL=redis://127.0.0.1:6379/0\n" in shown
    # Tokens from a file or JWTs: a line that does nothing when pasted, rather than one bash cannot parse.
    assert "\n  # export TASKS_BACKEND_TOKEN=<a token of yours>\n" in Banner(token=None, **common).render(1.0)
