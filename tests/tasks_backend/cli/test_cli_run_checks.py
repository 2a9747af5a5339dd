"""`tasks-backend run` refuses, before it starts anything, what would never come up or would be shared by
mistake, and prints nothing it was given: real `run` processes, a real Redis."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis

from tasks_backend.devtools.embedded import EmbeddedRedis, free_port
from tests.conftest import wait_until
from tests.support.procs import ROOT
from tests.tasks_backend.cli.test_cli_run import _block, _group_alive, _paste, _pasted

#: What a shell holds that `run` reads: none of the test session's own.
_OWN = ("TASKS_BACKEND_", "FLOWER_", "REDIS_URL", "CELERY_BROKER_URL")


def _env(**given: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OWN)}
    env.update({"PORT": str(free_port()), "FLOWER_PORT": str(free_port()), "LOG_FORMAT": "text", **given})
    return env


def _argv(data_dir: Path) -> list[str]:
    return [sys.executable, "-m", "tasks_backend.cli", "run", "--data-dir", str(data_dir)]


@dataclass
class Ended:
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float


def _until_it_ends(data_dir: Path, env: dict[str, str], timeout_s: float = 60.0) -> Ended:
    """Run `run` and wait for it to end by itself; one that keeps running fails the test (and is stopped with
    everything it started)."""
    started = time.monotonic()
    proc = subprocess.Popen(_argv(data_dir), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"`run` was still running after {timeout_s:.0f}s:\n{(out + err)[-3000:]}")
    finally:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    return Ended(proc.returncode, out, err, time.monotonic() - started)


class Running:
    """A `run` in the background, its output in a file; `stop` is Ctrl-C's SIGTERM."""

    def __init__(self, data_dir: Path, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(_argv(data_dir), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def block(self) -> str:
        return str(wait_until(lambda: _block(self.log.read_text()), 90, message="the ready block"))

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        finally:
            if _group_alive(self.proc.pid):
                os.killpg(self.proc.pid, signal.SIGKILL)
        assert self.proc.returncode == 0, self.log.read_text()[-3000:]


def test_a_second_run_on_the_same_data_directory_refuses_and_names_the_first(tmp_path: Path) -> None:
    """Two embedded Redis servers on one AOF would each answer 404 for the other's jobs: the second `run`
    names the first (pid, ports) and how to run another beside it, and starts nothing."""
    data = tmp_path / "data"
    first = Running(data, _env(), tmp_path / "first.log")
    try:
        block = first.block()
        redis_port = re.search(r"export REDIS_URL=redis://127\.0\.0\.1:(\d+)/0", block).group(1)  # type: ignore[union-attr]
        second = _until_it_ends(data, _env())  # other ports, the same folder
        assert second.returncode != 0
        assert second.stdout == "" and "Traceback" not in second.stderr
        message = " ".join(second.stderr.split())
        assert f"pid {first.proc.pid}" in message
        for port in (first.env["PORT"], first.env["FLOWER_PORT"], redis_port):
            assert port in message
        assert re.search(rf"tasks-backend run --data-dir {re.escape(str(data))}-2\b", message), message
        # It started no Redis of its own on that data directory; the first one still serves.
        assert (data / "redis" / "redis.log").read_text().count("Ready to accept connections") == 1
        assert httpx.get(f"http://127.0.0.1:{first.env['PORT']}/readyz", timeout=10).status_code == 200
    finally:
        first.stop()
    # Stopped, it leaves the directory free: the next run takes it.
    again = Running(data, _env(), tmp_path / "again.log")
    try:
        again.block()
    finally:
        again.stop()


@pytest.mark.parametrize("unreachable", ["REDIS_URL", "CELERY_BROKER_URL"])
def test_run_names_the_server_it_cannot_reach_and_exits(tmp_path: Path, unreachable: str) -> None:
    """A stale URL in the shell: `run` says which server it cannot reach (its password masked) and which
    variable named it, within about 10 s, and exits non-zero without starting anything."""
    password = secrets.token_hex(8)
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    given = {"REDIS_URL": f"redis://:{password}@{dead}/0"}
    server = None
    if unreachable == "CELERY_BROKER_URL":
        server = EmbeddedRedis(appendonly=False, data_dir=str(tmp_path)).start()
        given = {"REDIS_URL": server.url, "CELERY_BROKER_URL": f"amqp://app:{password}@{dead}//"}
    try:
        ended = _until_it_ends(tmp_path / "data", _env(**given))
    finally:
        if server is not None:
            server.stop()
    # The issue asks for about 10 s; the margin is for a loaded machine, a `run` that waits forever fails anyway.
    assert ended.elapsed_s < 30
    assert ended.returncode != 0
    assert ended.stdout == "" and "Traceback" not in ended.stderr
    assert password not in ended.stderr
    masked = given[unreachable].replace(password, "***")
    assert f"at {masked} ({unreachable}, from the environment)" in ended.stderr, ended.stderr
    assert len(ended.stderr.strip().splitlines()) <= 2, ended.stderr
    assert not (tmp_path / "data").exists()


def test_run_masks_a_password_given_as_a_query_option_of_the_url(tmp_path: Path) -> None:
    """redis-py also takes the credentials as `?username=...&password=...`: the refusal shows neither."""
    password = secrets.token_hex(8)
    url = f"redis://127.0.0.1:{free_port()}/0?username=ops&password={password}"
    ended = _until_it_ends(tmp_path / "data", _env(REDIS_URL=url))
    assert ended.returncode != 0
    assert password not in ended.stderr and "username=ops" not in ended.stderr
    assert "/0?username=***&password=*** (REDIS_URL, from the environment)" in ended.stderr, ended.stderr


@pytest.mark.parametrize(("name", "value", "says"), [
    ("TASKS_BACKEND_JOBS", "tasks_backend.demoo",
     "TASKS_BACKEND_JOBS names 'tasks_backend.demoo', which cannot be imported"),
    ("TASKS_BACKEND_LEASE", "30s", "TASKS_BACKEND_LEASE='30s' is not a number"),
])
def test_a_configuration_error_is_said_once_and_starts_nothing(tmp_path: Path, name: str, value: str,
                                                               says: str) -> None:
    """Found before any child starts (no Redis, no web app restarted forever), printed once without a traceback,
    and the exit status says so: restarts are for crashes, not for configuration."""
    ended = _until_it_ends(tmp_path / "data", _env(**{name: value}))
    assert ended.returncode != 0
    assert ended.stdout == "" and "Traceback" not in ended.stderr
    assert ended.stderr.count(says) == 1, ended.stderr
    assert len(ended.stderr.strip().splitlines()) == 1, ended.stderr
    assert not (tmp_path / "data").exists()


def test_run_prints_no_secret_it_was_given_and_its_block_still_reaches_the_same_system(tmp_path: Path) -> None:
    """Tokens, a Redis password and Flower's password the user set are never written out (a CI log, a journal
    would keep them); the block refers to the user's own variables instead, so a shell that has them (a
    profile, or the user exporting them again) reaches the same system, and one that lacks them is told which."""
    password, token, flower = (secrets.token_hex(8) for _ in range(3))
    server = EmbeddedRedis(appendonly=False, data_dir=str(tmp_path)).start()
    redis.Redis(port=server.port).config_set("requirepass", password)
    given = {"REDIS_URL": f"redis://:{password}@127.0.0.1:{server.port}/0", "TASKS_BACKEND_TOKENS": f"me:{token}",
             "FLOWER_BASIC_AUTH": f"ops:{flower}", "TASKS_BACKEND_KEY_PREFIX": "tbgiven"}
    running = Running(tmp_path / "data", _env(**given), tmp_path / "run.log")
    try:
        block = running.block()
        shown = running.log.read_text()
        assert f"  Redis:    redis://:***@127.0.0.1:{server.port}/0  (REDIS_URL)\n" in shown
        assert "(user and password from FLOWER_BASIC_AUTH)" in shown
        assert "  # export TASKS_BACKEND_TOKEN=<one of your TASKS_BACKEND_TOKENS>\n" in block

        lacking = _paste(block, {"PATH": os.environ["PATH"]})
        assert lacking.returncode != 0 and "REDIS_URL" in lacking.stderr

        user_shell = {"PATH": os.environ["PATH"], "TASKS_BACKEND_TOKEN": token,
                      **{k: v for k, v in given.items() if k != "FLOWER_BASIC_AUTH"}}
        pasted = _pasted(block, user_shell)
        assert pasted["REDIS_URL"] == given["REDIS_URL"] and pasted["TASKS_BACKEND_TOKEN"] == token
        submit = subprocess.run([sys.executable, "-c", _SUBMIT], cwd=ROOT, capture_output=True, text=True,
                                env={**pasted, "PYTHONPATH": str(ROOT)}, timeout=60)
        assert submit.returncode == 0, submit.stderr
        job_id = submit.stdout.strip()
        answer = httpx.get(f"{pasted['TASKS_BACKEND_URL']}/v1/jobs/{job_id}", timeout=10,
                           headers={"Authorization": f"Bearer {pasted['TASKS_BACKEND_TOKEN']}"})
        assert answer.status_code == 200 and answer.json()["status"] == "completed"
    finally:
        try:
            running.stop()
        finally:
            server.stop()
    everything = running.log.read_text()  # what every child wrote as well, up to the stop
    for secret in (password, token, flower):
        assert secret not in everything


#: An application in the shell that pasted the block: it submits as the principal of the user's token, through
#: the Redis the server uses, and waits for a worker of `run`.
_SUBMIT = """
from tasks_backend import Principal, connect_service
service = connect_service()
me = Principal("me")
record, _ = service.submit(me, "demo.sleep", {"seconds": 0.1})
done = service.wait(me, record.id, timeout_s=45)
assert done.state == "completed", done.state
print(record.id)
"""
