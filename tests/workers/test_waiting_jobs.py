"""Waiting jobs over real worker processes and real HTTP: twenty 30-second sleepers on two worker slots while other
jobs run, and a parent waiting for three children that survives a SIGKILL of its worker (each child runs once)."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tasks_backend.config import Settings
from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import Runtime, build_runtime
from tests.conftest import ALICE, Serve, make_settings, wait_until
from tests.support.procs import Proc, sweeper_process, worker_process


class Deployment:
    """Worker and sweeper processes, the app over real HTTP, and a runtime to look at the store with."""

    def __init__(self, settings: Settings, tmp: Path, serve: Serve) -> None:
        self.settings, self.tmp = settings, tmp
        self.runtime: Runtime = build_runtime(settings)
        self.http = httpx.Client(base_url=serve(settings), headers=ALICE, timeout=10)
        self.procs: list[Proc] = []

    def worker(self, name: str, concurrency: int) -> Proc:
        self.procs.append(proc := worker_process(self.settings, self.tmp / f"{name}.log", concurrency=concurrency))
        return proc

    def sweeper(self) -> Proc:
        self.procs.append(proc := sweeper_process(self.settings, self.tmp / "sweeper.log"))
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


@pytest.fixture
def deployment(redis_base: str, tmp_path: Path, serve: Serve) -> Iterator[Deployment]:
    d = Deployment(make_settings(redis_base, lease_s=1.5, queued_grace_s=1.0, sweep_interval_s=0.2), tmp_path, serve)
    try:
        yield d
    except BaseException:
        for proc in d.procs:
            print(f"--- {proc.log_path.name}\n{proc.output()[-3000:]}")
        raise
    finally:
        for proc in d.procs:
            proc.stop()
        d.http.close()


def test_twenty_sleepers_hold_none_of_two_worker_slots(deployment: Deployment, tmp_path: Path) -> None:
    deployment.worker("w", concurrency=2)
    sleepers = [deployment.submit("test.sleeper", {"seconds": 30}) for _ in range(20)]
    wait_until(lambda: all(deployment.state(j) is JobState.SUSPENDED for j in sleepers), 20, interval=0.1,
               message="every sleeper to park")
    shown = deployment.job(sleepers[0])
    assert shown["status"] == "working" and shown["statusMessage"].startswith("Sleeping until ")
    wake_ms = [deployment.runtime.store.waiting_of(j).wake_ms for j in sleepers]  # type: ignore[union-attr]
    # Other jobs run meanwhile, on the two slots the sleepers gave back.
    others = [deployment.submit("test.steps", {"ledger": str(tmp_path / f"other{i}"), "steps": 2}) for i in range(6)]
    wait_until(lambda: all(deployment.state(j) is JobState.COMPLETED for j in others), 15, interval=0.1,
               message="the other jobs to finish")
    assert all(deployment.state(j) is JobState.SUSPENDED for j in sleepers)
    assert deployment.runtime.store.now_ms() < min(wake_ms)  # long before the sleepers' time
    wait_until(lambda: all(deployment.state(j) is JobState.COMPLETED for j in sleepers), 40, interval=0.1,
               message="every sleeper to wake and finish")
    for job_id, due in zip(sleepers, wake_ms, strict=True):
        record = deployment.runtime.store.get(job_id)
        assert record is not None and record.result == {"slept": 30.0, "answer": None}
        # Woken within about a second of its time (and run on one of two slots, each run a few ms).
        assert due is not None and due <= record.updated_ms <= due + 1500, (record.updated_ms - due)


def lines(ledger: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in ledger.read_text().splitlines()] if ledger.exists() else []


@pytest.mark.parametrize("kill_when", ["parked", "spawning"])
def test_a_parent_survives_a_sigkill_of_its_worker_and_each_child_runs_once(
        deployment: Deployment, tmp_path: Path, kill_when: str) -> None:
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    first = deployment.worker("w1", concurrency=4)
    deployment.sweeper()
    parent = deployment.submit("test.parent", {"ledger": str(ledger), "children": 3, "gate": str(gate)})
    if kill_when == "parked":
        wait_until(lambda: deployment.state(parent) is JobState.SUSPENDED
                   and sum(e["event"] == "child start" for e in lines(ledger)) == 3, 30,
                   message="the parent to wait for its three running children")
    else:
        wait_until(lambda: deployment.runtime.store.recorded_step(parent, "spawn:0"), 30,
                   message="the first child to be spawned")
    first.kill_group(signal.SIGKILL)
    first.popen.wait(10)
    deployment.worker("w2", concurrency=4)
    gate.touch()
    done = wait_until(lambda: (j := deployment.job(parent))["status"] == "completed" and j, 60,
                      message="the parent to complete")
    assert done["result"]["results"] == [{"child": 0}, {"child": 1}, {"child": 2}]
    assert sorted(e["index"] for e in lines(ledger) if e["event"] == "child") == [0, 1, 2]
    listed = deployment.http.get("/v1/jobs", params={"parent": parent}).json()["jobs"]
    assert sorted(j["taskId"] for j in listed) == sorted(done["result"]["children"])
