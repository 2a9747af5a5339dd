"""Against a real FastMCP 4.1.4 + fastmcp-tasks 4.1.4 server (the 2026-07-28 tasks extension, tasks kept in Redis by
Docket) in a process of its own, run by the 2026 client environment (`make mcp-clients`): a tool that runs as a task
comes back as the result, a failing one raises `RemoteTaskFailed`, cancel reaches the server, a tool that asks for
input asks the job's owner and gets the answer, and the task outlives a restart of the server."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tasks_backend.devtools.embedded import free_port
from tasks_backend.model.domain import JobState
from tasks_backend.remote.client import Remotes
from tests.conftest import wait_until
from tests.support.procs import ROOT, Proc
from tests.tasks_backend.remote.conftest import RemoteDeployment

VENV = ".venv-mcp26"


class Server:
    """The FastMCP server process; `restart` stops it and starts it again on the same port, Redis and name."""

    def __init__(self, tmp: Path, redis_url: str) -> None:
        python = ROOT / VENV / "bin" / "python"
        if not python.exists():
            pytest.fail(f"{VENV} is missing: run `make mcp-clients` (make test builds it)")
        self.python, self.tmp, self.redis_url = python, tmp, redis_url
        self.port, self.name = free_port(), f"peer{secrets.token_hex(4)}"
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.ledger = tmp / "server-ledger"
        self.ledger.touch()
        self.proc = self._start()

    def _start(self) -> Proc:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PYTHONPATH"] = str(ROOT)
        proc = Proc([str(self.python), "-m", "tests.support.fastmcp_peer", str(self.port), self.redis_url, self.name,
                     str(self.ledger)], env, self.tmp / "server.log")

        def up() -> bool:
            assert proc.alive(), proc.output()[-4000:]
            return _listening(self.port)

        wait_until(up, 60, interval=0.2, message="the FastMCP server to start")
        return proc

    def restart(self) -> None:
        self.proc.stop()
        self.proc = self._start()

    def tasks_made(self) -> list[str]:
        return self.ledger.read_text().splitlines()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def server(tmp_path: Path, redis_base: str) -> Iterator[Server]:
    s = Server(tmp_path, f"{redis_base}/13")
    yield s
    s.proc.stop()


def test_a_tool_run_as_a_task_comes_back_as_the_result(deployment: RemoteDeployment, server: Server) -> None:
    deployment.worker("w", concurrency=1)
    done = deployment.submit("test.remote_tool", {"url": server.url, "tool": "crunch", "arguments": {"seconds": 1}})
    failed = deployment.submit("test.remote_tool", {"url": server.url, "tool": "refuse",
                                                    "arguments": {"why": "no stock"}})
    assert deployment.finished(done, timeout=40)["result"] == {"remote": {"crunched": 1.0}}
    job = deployment.finished(failed, timeout=40)
    assert job["status"] == "failed" and job["error"]["type"] == "RemoteTaskFailed"
    assert "no stock" in job["error"]["message"]
    assert sorted(server.tasks_made()) == ["crunch 1.0", "refuse no stock"]


def test_cancelling_the_job_cancels_the_servers_task(deployment: RemoteDeployment, server: Server) -> None:
    deployment.worker("w")
    job = deployment.submit("test.remote_tool", {"url": server.url, "tool": "crunch", "arguments": {"seconds": 120}})
    wait_until(lambda: deployment.state(job) is JobState.SUSPENDED, 20, interval=0.1, message="the job to park")
    [(_, ref)] = deployment.runtime.store.open_remotes(job)
    assert deployment.http.post(f"/v1/jobs/{job}/cancel").status_code in (200, 202)
    remotes = Remotes(deployment.settings)
    wait_until(lambda: remotes.get(ref).state == "cancelled", 15, interval=0.2,
               message="the server's task to be cancelled")
    assert deployment.runtime.store.open_remotes(job) == []


def test_a_tool_that_asks_gets_the_owners_answer_across_a_server_restart(deployment: RemoteDeployment,
                                                                         server: Server) -> None:
    deployment.worker("w")
    job = deployment.submit("test.remote_tool", {"url": server.url, "tool": "approve", "arguments": {"item": "A-1"}})
    wait_until(lambda: deployment.state(job) is JobState.INPUT_REQUIRED, 40, interval=0.1,
               message="the server's question to reach the job")
    [(key, request)] = deployment.job(job)["inputRequests"].items()
    assert key.startswith("remote:0/") and request["params"]["message"] == "Approve A-1?"
    server.restart()  # the task lives in Redis (Docket), not in the server process
    answer = deployment.http.post(f"/v1/jobs/{job}/input", json={"inputResponses": {key: {"approved": True}}})
    assert answer.status_code in (200, 202), answer.text
    result = deployment.finished(job, timeout=40)["result"]["remote"]
    assert result == {"item": "A-1", "action": "accept", "approved": True}
    assert server.tasks_made() == ["approve A-1"]


def test_the_servers_task_is_made_once_across_a_sigkill_of_the_worker_while_the_job_waits(
        deployment: RemoteDeployment, server: Server) -> None:
    first = deployment.worker("first")
    deployment.sweeper()
    job = deployment.submit("test.remote_tool", {"url": server.url, "tool": "crunch", "arguments": {"seconds": 4}})
    wait_until(lambda: deployment.state(job) is JobState.SUSPENDED, 20, interval=0.05, message="the job to park")
    first.kill_group()
    deployment.worker("second")
    assert deployment.finished(job, timeout=60)["result"] == {"remote": {"crunched": 4.0}}
    assert server.tasks_made() == ["crunch 4.0"]
