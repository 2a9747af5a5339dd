"""A rerun keeping steps through a SIGKILL of its worker, with separate worker and sweeper processes and real HTTP:
the steps the original recorded never run again, and the step the rerun was killed in takes effect once."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from tasks_backend.model.domain import JobState
from tests.conftest import wait_until
from tests.support.deployment import Deployment
from tests.workers.test_waiting_jobs import lines

pytestmark = pytest.mark.chaos


def test_a_rerun_keeping_steps_killed_mid_step_repeats_no_recorded_step(deployment: Deployment,
                                                                        tmp_path: Path) -> None:
    ledger, switch, gate = tmp_path / "ledger", tmp_path / "switch", tmp_path / "gate"
    deployment.sweeper()
    first = deployment.worker("w1", concurrency=1)
    original = deployment.submit("test.fails_at_third", {"ledger": str(ledger), "switch": str(switch),
                                                         "gate": str(gate)})
    failed = deployment.finished(original)
    assert failed["status"] == "failed" and "third step" in failed["error"]["message"], failed
    assert [(e["job"], e["step"]) for e in lines(ledger) if e["event"] == "effect"] == [(original, 0), (original, 1)]

    switch.touch()
    reply = deployment.http.post(f"/v1/jobs/{original}/rerun", json={"keepSteps": True})
    assert reply.status_code == 202, reply.text
    rerun = reply.json()["taskId"]

    def thirds() -> list[dict[str, Any]]:
        return [e for e in lines(ledger) if e["event"] == "third" and e["job"] == rerun]

    wait_until(thirds, 20, message="the rerun to start its third step")
    assert deployment.state(rerun) is JobState.RUNNING
    store = deployment.runtime.store  # the original's two steps, copied to the rerun as done; the third not yet
    assert [store.recorded_step(rerun, f"s{i}") for i in range(3)] == ["0", "1", None]
    first.kill_group(signal.SIGKILL)
    first.popen.wait(10)
    gate.touch()  # the next run of the third step gets past it
    deployment.worker("w2", concurrency=1)
    done = deployment.finished(rerun, 60)
    assert done["status"] == "completed" and done["result"] == {"steps": 3} and done["rerunOf"] == original, done
    effects = [(e["job"], e["step"]) for e in lines(ledger) if e["event"] == "effect"]
    assert effects == [(original, 0), (original, 1), (rerun, 2)]
    assert len(thirds()) == 2 and thirds()[0]["pid"] != thirds()[1]["pid"]  # killed once, run again elsewhere
