"""`tasks-backend rerun` and the bulk forms of `cancel` and `rerun` against the app over real HTTP and a worker."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tasks_backend.cli import main
from tasks_backend.cli.operate_commands import since_to_rfc3339
from tasks_backend.client import Client
from tests.conftest import wait_until

pytestmark = pytest.mark.usefixtures("worker")


@pytest.fixture
def me(users: Any, live_url: str) -> tuple[Client, Any]:
    _, token = users.new("clirerun")
    runner = CliRunner()
    env = {"TASKS_BACKEND_URL": live_url, "TASKS_BACKEND_TOKEN": token}

    def invoke(*args: str, expect: int = 0, input: str | None = None) -> Result:
        result = runner.invoke(main, list(args), env=env, input=input, catch_exceptions=False)
        assert result.exit_code == expect, (result.stdout, result.stderr)
        return result

    return Client(live_url, token), invoke


def failed_jobs(client: Client, tmp_path: Path, count: int) -> list[str]:
    ids = [client.submit("test.fails_until", {"ledger": str(tmp_path / "ledger"), "switch": str(tmp_path / "switch"),
                                              "key": i}).id for i in range(count)]
    for job_id in ids:
        assert client.wait(job_id, timeout=20).status == "failed"
    return ids


def test_rerun_one_job_by_id_and_keep_its_steps(me: tuple[Client, Any], tmp_path: Path) -> None:
    client, cli = me
    [original] = failed_jobs(client, tmp_path, 1)
    (tmp_path / "switch").touch()
    new_id = cli("rerun", original, "--keep-steps").stdout.strip()
    done = client.wait(new_id, timeout=20)
    assert done.status == "completed" and done.rerun_of == original
    assert len((tmp_path / "ledger").read_text().splitlines()) == 2  # the kept steps were not run again
    assert client.rerun(original).rerun_of == original  # the Python client's call


def test_bulk_rerun_counts_asks_and_follows(me: tuple[Client, Any], tmp_path: Path) -> None:
    client, cli = me
    originals = failed_jobs(client, tmp_path, 3)
    (tmp_path / "switch").touch()
    dry = json.loads(cli("rerun", "--status", "failed", "--operation", "test.fails_until", "--since", "1h",
                         "--dry-run").stdout)
    assert dry["matched"] == 3 and sorted(dry["ids"]) == sorted(originals)
    refused = cli("rerun", "--status", "failed", "--since", "1h", input="n\n", expect=1)
    assert "Rerun 3 jobs? [y/N]" in refused.stderr
    done = cli("rerun", "--status", "failed", "--operation", "test.fails_until", input="y\n")
    assert "Rerun 3 jobs? [y/N]" in done.stderr and "3 done" in done.stderr
    result = json.loads(done.stdout)
    assert result["done"] == 3 and sorted(result["ids"]) == sorted(originals)
    for new_id in result["newIds"]:
        assert client.wait(new_id, timeout=20).status == "completed"


def test_bulk_cancel_with_yes_and_cancel_by_id(me: tuple[Client, Any], tmp_path: Path) -> None:
    client, cli = me
    params = {"ledger": str(tmp_path / "l"), "steps": 2, "gate": str(tmp_path / "never")}
    ids = [client.submit("test.steps", params).id for _ in range(2)]
    wait_until(lambda: all(client.get(i).status == "working" for i in ids), 10)
    result = json.loads(cli("cancel", "--operation", "test.steps", "--status", "working", "--yes").stdout)
    assert sorted(result["ids"]) == sorted(ids)
    assert all(client.get(i).status == "cancelled" for i in ids)
    assert "already finished" in cli("cancel", ids[0], expect=1).stderr
    assert "not both" in cli("cancel", ids[0], "--status", "failed", expect=2).stderr
    assert "Unknown status" in cli("cancel", "--status", "lost", "--yes", expect=1).stderr


def test_since_reads_a_span_back_from_now() -> None:
    now = dt.datetime(2026, 1, 2, 12, 0, tzinfo=dt.UTC)
    assert since_to_rfc3339("1h", now) == "2026-01-02T11:00:00Z"
    assert since_to_rfc3339("2d", now) == "2025-12-31T12:00:00Z"
