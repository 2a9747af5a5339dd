"""`tasks-backend audit` against the app served over real HTTP: the caller's entries, filtered, as a table."""

from __future__ import annotations

import json

import httpx
import pytest
from click.testing import CliRunner

from tasks_backend.cli import main
from tests.conftest import Users, bearer

pytestmark = pytest.mark.usefixtures("worker")


def test_audit_prints_the_entries_about_the_callers_jobs(live_url: str, users: Users) -> None:
    name, token = users.new("cli-audit")
    with httpx.Client(base_url=live_url, headers=bearer(token), timeout=10) as http:
        refund = {"operation": "demo.refund", "params": {"order_id": "o-1", "amount": 1}}
        ids = [http.post("/v1/jobs", json=refund).json()["taskId"] for _ in range(2)]
        for job_id in ids:
            cancel = http.post(f"/v1/jobs/{job_id}/cancel", headers={"X-Request-Id": f"cancel-{job_id[:8]}"})
            assert cancel.status_code == 202, cancel.text
    env = {"TASKS_BACKEND_URL": live_url, "TASKS_BACKEND_TOKEN": token}
    runner = CliRunner()
    shown = runner.invoke(main, ["audit", "--since", "1h"], env=env, catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    lines = [line.split("\t") for line in shown.stdout.splitlines()]
    assert lines[0] == ["at", "principal", "action", "on", "detail", "address", "requestId"]
    cancelled = [row for row in lines[1:] if row[2] == "job.cancel"]
    assert [(row[1], row[3], row[6]) for row in cancelled] == [
        (name, job_id, f"cancel-{job_id[:8]}") for job_id in reversed(ids)]
    one = runner.invoke(main, ["audit", "--job", ids[0], "--principal", name, "--json"], env=env)
    assert [e["jobId"] for e in json.loads(one.stdout)["entries"]] == [ids[0]]
    bad = runner.invoke(main, ["audit", "--since", "last week"], env=env)
    assert bad.exit_code == 1 and "since" in bad.output
