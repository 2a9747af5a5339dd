"""Stopping `tasks-backend run`: Ctrl-C and hang-up stop it in order and quietly, a running job is handed back,
and nothing it started outlives it, even when it is killed outright."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tasks_backend.devtools.embedded import EmbeddedRedis, free_port
from tasks_backend.store.keys import Keys
from tests.conftest import wait_until
from tests.support.procs import ROOT, service_pids, session_pids

JOBS = "tasks_backend.demo,tests.support.jobs"
#: Lines a stop must not print: tracebacks, Celery's and gunicorn's own stop chatter, a worker that lost Redis.
NOISE = ("Traceback", "SystemExit", "was sent SIG", "Warm shutdown", "push delivery paused", "ImportError",
         "has no attribute", "Restarting celery worker")
PUT_BACK = re.compile(r"unacknowledged message|Requeuing undeliverable message for queue '\w+': No consumers")
STOP_LINE = re.compile(r"tasks_backend\.devtools\.supervisor (\w+) \(pid \d+\) (stopped in [\d.]+s|killed: .*)$")


class Run:
    """`tasks-backend run` in a session of its own (as a shell starts a job), its output in a file."""

    def __init__(self, tmp_path: Path, name: str, **env: str) -> None:
        self.port, self.flower_port = free_port(), free_port()
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("TASKS_BACKEND_", "FLOWER_", "REDIS_URL", "CELERY_BROKER_URL"))}
        base.update({"PORT": str(self.port), "FLOWER_PORT": str(self.flower_port), "LOG_FORMAT": "text",
                     "TASKS_BACKEND_JOBS": JOBS, **env})
        self.log = tmp_path / f"{name}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "tasks_backend.cli", "run", "--data-dir",
                                          str(tmp_path / "data")],
                                         cwd=ROOT, env=base, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.base = f"http://127.0.0.1:{self.port}"
        token = wait_until(lambda: (m := re.search(r"export TASKS_BACKEND_TOKEN=(\S+)", self.text())) and m.group(1),
                           120, interval=0.2, message="the ready banner")
        self.headers = {"Authorization": f"Bearer {token}"}

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def submit(self, operation: str, params: dict[str, object]) -> str:
        reply = httpx.post(f"{self.base}/v1/jobs", json={"operation": operation, "params": params},
                           headers=self.headers, timeout=10)
        assert reply.status_code == 202, reply.text
        return reply.headers["Location"].rsplit("/", 1)[-1]

    def status(self, job_id: str) -> str | None:
        try:
            reply = httpx.get(f"{self.base}/v1/jobs/{job_id}", headers=self.headers, timeout=5)
        except httpx.TransportError:
            return None
        return str(reply.json()["status"]) if reply.status_code == 200 else None

    def signal_group(self, sig: int) -> tuple[float, str]:
        """Send `sig` as a terminal does (to the whole foreground process group); wait for the exit.
        Returns how long it took and what was printed from then on."""
        printed = len(self.log.read_bytes())
        started = time.monotonic()
        os.killpg(self.proc.pid, sig)
        self.proc.wait(90)
        return time.monotonic() - started, self.log.read_bytes()[printed:].decode(errors="replace")

    def kill_leftovers(self) -> list[str]:
        """Kill (and name) whatever of this run's session is still alive."""
        left = session_pids(self.proc.pid)
        names = [Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
                 for pid in left if Path(f"/proc/{pid}/cmdline").exists()]
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return names


def _ledger(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _stops(printed: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for line in printed.splitlines() if (m := STOP_LINE.search(line))]


def test_ctrl_c_stops_in_order_hands_the_running_job_back_and_it_resumes_on_the_next_start(tmp_path: Path) -> None:
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    first = Run(tmp_path, "first")
    try:
        job_id = first.submit("test.steps", {"ledger": str(ledger), "steps": 3, "gate": str(gate)})
        # Step 0 is recorded; the job now waits (at a cancellation point) for the gate of step 1.
        wait_until(lambda: any(e.get("step") == 0 for e in _ledger(ledger)), 60, interval=0.1,
                   message="the job's first step")
        took, printed = first.signal_group(signal.SIGINT)
    finally:
        leftovers = first.kill_leftovers()
    assert not leftovers, leftovers
    assert first.proc.returncode == 0, first.text()[-3000:]
    # What serves first, then the worker (which hands its job back through Redis), Redis last; each in a bounded
    # time (about 10 s in all; the margin is for a loaded machine), where it took 30 s and Redis went first.
    stops = _stops(printed)
    names = [name for name, _ in stops]
    assert sorted(names[:3]) == ["flower", "sweeper", "web"] and names[3:] == ["worker", "redis"], printed
    assert dict(stops)["worker"].startswith("stopped"), printed
    assert took < 20, printed
    for noise in NOISE:
        assert noise not in printed, printed
    # Each process says one line: the supervisor's; the worker adds one about the job it handed back. Kombu may add
    # that a message went back on its queue: the restore of unacknowledged ones, or the handed-back job itself when a
    # fetch already under way brings it in after the worker stopped consuming. Both put the message back.
    others = [line for line in printed.splitlines() if line.strip() and not STOP_LINE.search(line)
              and job_id not in line and not PUT_BACK.search(line)]
    assert not others, printed

    # Handed back at once: queued again, no lease to wait for, this run not counted as an attempt.
    record = _stored(tmp_path, job_id)
    assert record["state"] == "queued", record
    assert not record.get("lease") and not record.get("worker") and record["attempts"] == "0", record

    second = Run(tmp_path, "second")
    try:
        wait_until(lambda: len([e for e in _ledger(ledger) if e["event"] == "start"]) == 2, 60, interval=0.1,
                   message="the job to start again")
        for step in (1, 2):
            Path(f"{gate}.{step}").touch()
        wait_until(lambda: second.status(job_id) == "completed", 60, interval=0.2, message="the job to complete")
        # It resumed from its last recorded step: step 0's effect happened once.
        effects = [e["step"] for e in _ledger(ledger) if e["event"] == "effect"]
        assert effects == [0, 1, 2]

        # A worker sent SIGHUP restarts itself (Celery runs its command line again) and serves on.
        worker = service_pids(second.proc.pid)["worker"]
        os.kill(worker, signal.SIGHUP)
        wait_until(lambda: "Restarting celery worker" in second.text(), 30, message="the worker to restart")
        again = second.submit("test.noop", {})
        polls: list[str | None] = []

        def finished() -> bool:
            polls.append(second.status(again))
            return polls[-1] == "completed"

        wait_until(finished, 90, interval=0.2, message="a job served by the restarted worker")
        assert "ImportError" not in second.text() and f"worker (pid {worker}) exited" not in second.text()
        wait_until(lambda: f"[{again}] succeeded" in second.text(), 30, message="the worker's line for the job")
        # gunicorn writes a request's access line after its answer went out: every poll's line is in before the
        # stop, so that what the stop prints is the stop's alone.
        answered = sum(status is not None for status in polls)  # a poll that reached no server logged nothing
        wait_until(lambda: second.text().count(f'"GET /v1/jobs/{again} HTTP/1.1"') >= answered, 30,
                   message="the access line of every poll")

        # The terminal goes away (SIGHUP to the group): the same quiet stop, one line per process.
        _, printed = second.signal_group(signal.SIGHUP)
    finally:
        leftovers = second.kill_leftovers()
    assert not leftovers, leftovers
    assert second.proc.returncode == 0, second.text()[-3000:]
    assert sorted(name for name, _ in _stops(printed)) == ["flower", "redis", "sweeper", "web", "worker"], printed
    assert [line for line in printed.splitlines() if line.strip() and not STOP_LINE.search(line)] == [], printed


def _stored(tmp_path: Path, job_id: str) -> dict[str, str]:
    """The job's record as the stopped run's embedded Redis left it (its AOF)."""
    aof = EmbeddedRedis(data_dir=str(tmp_path / "data" / "redis")).start()
    try:
        return redis.Redis(port=aof.port, decode_responses=True).hgetall(Keys("tb").job(job_id))
    finally:
        aof.stop()


def test_a_job_that_reaches_no_cancellation_point_is_handed_back_all_the_same(tmp_path: Path) -> None:
    """A job that never looks up holds its worker: it is handed back from beside it (fenced by its token), and the
    worker is killed at the end of its time: the stop still takes about 10 s, and the job waits for no lease."""
    ledger = tmp_path / "ledger"
    run = Run(tmp_path, "run")
    try:
        job_id = run.submit("test.stubborn", {"ledger": str(ledger)})
        wait_until(lambda: _ledger(ledger), 60, interval=0.1, message="the job to start")
        took, printed = run.signal_group(signal.SIGINT)
    finally:
        leftovers = run.kill_leftovers()
    assert not leftovers, leftovers
    assert took < 20, printed
    stops = dict(_stops(printed))
    assert stops["worker"].startswith("killed") and stops["redis"].startswith("stopped"), printed
    record = _stored(tmp_path, job_id)
    assert record["state"] == "queued" and not record.get("lease") and record["attempts"] == "0", record


@pytest.fixture
def own_redis() -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis().start()
    yield server
    if server.process is not None:
        os.kill(server.process.pid, signal.SIGCONT)
    server.stop(kill=True)


@pytest.mark.parametrize("state", ["job running", "redis unreachable", "worker reconnecting"])
def test_killing_run_outright_takes_every_process_with_it(tmp_path: Path, own_redis: EmbeddedRedis,
                                                           state: str) -> None:
    """`kill -9` of `tasks-backend run` leaves nothing behind, whatever its worker is doing: running a job (which
    a worker asked to stop would wait for), with Redis not answering, or reconnecting to a Redis that is gone."""
    ledger = tmp_path / "ledger"
    run = Run(tmp_path, "run", REDIS_URL=own_redis.url)
    try:
        run.submit("test.spin", {"ledger": str(ledger)})
        wait_until(lambda: _ledger(ledger), 60, interval=0.1, message="the job to start")
        assert own_redis.process is not None
        if state == "redis unreachable":
            os.kill(own_redis.process.pid, signal.SIGSTOP)  # up, but answering nothing
            wait_until(lambda: "Redis is unreachable" in run.text(), 60, interval=0.2,
                       message="the worker to find Redis unreachable")
        elif state == "worker reconnecting":
            own_redis.stop(kill=True)
            wait_until(lambda: re.search(r"[Cc]onnection to broker lost|Trying again in|Cannot connect to redis",
                                         run.text()), 60, interval=0.2, message="the worker to reconnect")
        pids = session_pids(run.proc.pid)
        assert len(pids) >= 6  # run, web and its workers, the worker and its pool, sweeper, Flower
        run.proc.kill()
        run.proc.wait(10)
        with contextlib.suppress(AssertionError):  # what is left is named below
            wait_until(lambda: not session_pids(run.proc.pid), 30, interval=0.1,
                       message="every process of the run to end")
    finally:
        leftovers = run.kill_leftovers()
    assert not leftovers, leftovers
