"""Waiting jobs over real worker processes and real HTTP: twenty 30-second sleepers on two worker slots while other
jobs run, and a parent waiting for three children that survives a SIGKILL of its worker (each child runs once)."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tasks_backend.model.domain import JobState
from tests.conftest import Serve, make_settings, wait_until
from tests.support.deployment import Deployment


@pytest.fixture
def deployment(redis_base: str, tmp_path: Path, serve: Serve) -> Iterator[Deployment]:
    d = Deployment(make_settings(redis_base, lease_s=1.5, queued_grace_s=1.0, sweep_interval_s=0.2), tmp_path, serve)
    failed = True
    try:
        yield d
        failed = False
    finally:
        d.close(show_logs=failed)


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
