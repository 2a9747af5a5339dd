"""`tasks-backend schedule add|list|rm|pause|resume` against the app served over real HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner, Result

from tasks_backend.cli import main
from tests.conftest import Users


@pytest.fixture
def cli(live_url: str, users: Users) -> Any:
    runner = CliRunner()
    env = {"TASKS_BACKEND_URL": live_url, "TASKS_BACKEND_TOKEN": users.new("cli-sched")[1]}

    def invoke(*args: str, expect: int = 0) -> Result:
        result = runner.invoke(main, ["schedule", *args], env=env, catch_exceptions=False)
        assert result.exit_code == expect, (result.stdout, result.stderr)
        return result

    return invoke


def test_add_list_pause_resume_rm(cli: Any) -> None:
    made = json.loads(cli("add", "nightly", "demo.export", "rows=3", "--cron", "0 3 * * *", "--timezone",
                          "Europe/Paris", "--catch-up", "none", "--priority", "7").stdout)
    assert made | {"nextRunAt": None} == {
        "name": "nightly", "operation": "demo.export", "params": {"rows": 3}, "cron": "0 3 * * *",
        "timezone": "Europe/Paris", "catchUp": "none", "priority": 7, "paused": False, "nextRunAt": None,
        "lastRunAt": None, "lastJobId": None}
    json.loads(cli("add", "often", "test.noop", "--every", "30").stdout)
    listed = cli("list").stdout.splitlines()
    assert listed[0].split("\t")[:3] == ["name", "operation", "when"]
    assert [line.split("\t")[:3] for line in listed[1:]] == [
        ["nightly", "demo.export", "0 3 * * * (Europe/Paris)"], ["often", "test.noop", "every 30s"]]
    assert json.loads(cli("pause", "often").stdout)["paused"] is True
    assert [s["paused"] for s in json.loads(cli("list", "--json").stdout)] == [False, True]
    assert json.loads(cli("resume", "often").stdout)["paused"] is False
    assert "Deleted schedule often" in cli("rm", "often").stderr
    assert [s["name"] for s in json.loads(cli("list", "--json").stdout)] == ["nightly"]


def test_refusals_name_the_field_and_a_missing_schedule_is_said(cli: Any) -> None:
    bad = cli("add", "x", "test.noop", "--cron", "not cron", expect=1)
    assert "cron" in bad.stderr and "422" in bad.stderr
    assert "No such schedule" in cli("rm", "nothing", expect=1).stderr
    assert "--cron or --every" in cli("add", "x", "test.noop", expect=2).stderr


def test_list_follows_the_pages(cli: Any) -> None:
    for name in ("p1", "p2", "p3"):
        cli("add", name, "test.noop", "--every", "60")
    listed = json.loads(cli("list", "--json", "--page-size", "2").stdout)
    assert [s["name"] for s in listed] == ["p1", "p2", "p3"]
    assert [line.split("\t")[0] for line in cli("list", "--page-size", "1").stdout.splitlines()[1:]] == [
        "p1", "p2", "p3"]
