"""Waiting jobs over real worker processes and real HTTP: twenty 30-second sleepers on two worker slots while other
jobs run, a parent waiting for three children that survives a SIGKILL of its worker (each child runs once), and a
question's deadline that passes while its worker and both sweepers are SIGKILLed (its answer taken once)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tasks_backend.model.domain import JobState
from tests.conftest import wait_until
from tests.support.deployment import Deployment
from tests.support.procs import sweeper_process


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


@pytest.mark.parametrize("on_timeout", [{"approved": False}, "fail"], ids=["default-answer", "fail"])
def test_a_question_deadline_passes_through_sigkills_and_takes_effect_once(
        deployment: Deployment, tmp_path: Path, on_timeout: Any) -> None:
    """The worker and both sweepers are SIGKILLed while the job asks; the deadline passes with nothing alive to see
    it; two sweepers start again (each may time the question out) and then a worker: the job goes on with the
    default answer, or fails, once, and the step after the question runs once (or never)."""
    ledger, store = tmp_path / "ledger", deployment.runtime.store
    sweepers = [sweeper_process(deployment.settings, tmp_path / f"sweeper{i}.log") for i in (1, 2)]
    deployment.procs += sweepers
    first = deployment.worker("w1")
    job_id = deployment.submit("test.ask_then_step", {"ledger": str(ledger), "deadline_s": 3,
                                                      "on_timeout": on_timeout})
    wait_until(lambda: deployment.state(job_id) is JobState.INPUT_REQUIRED, 20, message="the question")
    asked = store.get(job_id)
    assert asked is not None and asked.input_requests
    due = int(asked.input_requests["approve"]["params"]["_meta"]["io.tasks-backend/question"]["deadlineMs"])
    for proc in (first, *sweepers):
        proc.kill_group(signal.SIGKILL)
        proc.popen.wait(10)
    assert store.now_ms() < due, "the processes were killed after the deadline"
    wait_until(lambda: store.now_ms() > due + 300, 15, interval=0.1, message="the deadline to pass")
    assert deployment.state(job_id) is JobState.INPUT_REQUIRED  # nothing alive has seen it
    deployment.procs += [sweeper_process(deployment.settings, tmp_path / f"sweeper{i}.log") for i in (3, 4)]
    wait_until(lambda: deployment.state(job_id) is not JobState.INPUT_REQUIRED, 15, interval=0.1,
               message="a restarted sweeper to time the question out")
    deployment.worker("w2")
    done = deployment.finished(job_id, 30)
    effects = [e for e in lines(ledger) if e["event"] == "effect"]
    if on_timeout == "fail":
        assert done["status"] == "failed" and "approve" in done["error"]["message"], done
        assert effects == []
    else:
        assert done["status"] == "completed" and done["result"] == {"approval": on_timeout}, done
        assert effects == [{"event": "effect", "answer": on_timeout}]
    assert done["answeredBy"]["approve"]["by"] == "timeout"
    # One answer recorded, one resume from input in the job's history.
    feed = [fields for _, fields in store.redis.xrange(store.keys.events(job_id))]
    assert sum(f.get("m") == "Input received; resuming." for f in feed) == 1, feed
    assert [f["s"] for f in feed].count(done["status"]) == 1, feed
