"""The client commands of `tasks-backend` against the app served over real HTTP and a real worker."""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import logging
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from tasks_backend.access.auth import parse_token_file, token_digest
from tasks_backend.cli import main
from tasks_backend.cli.client_commands import EXIT_INPUT_REQUIRED, parse_pairs
from tasks_backend.serving.logs import JsonFormatter
from tests.conftest import wait_until


@pytest.fixture
def user(users: Any) -> tuple[str, str]:
    return users.new("cli")  # type: ignore[no-any-return]


@pytest.fixture(autouse=True)
def no_token_in_logs(caplog: pytest.LogCaptureFixture, user: tuple[str, str]) -> Iterator[None]:
    caplog.set_level(logging.DEBUG)
    yield
    lines = [JsonFormatter().format(r) for r in caplog.records]
    assert not [line for line in lines if user[1] in line or "alice-token" in line]


@pytest.fixture
def cli(live_url: str, user: tuple[str, str]) -> Any:
    runner = CliRunner()
    env = {"TASKS_BACKEND_URL": live_url, "TASKS_BACKEND_TOKEN": user[1], "LOG_FORMAT": "json"}

    def invoke(*args: str, expect: int | None = 0) -> Result:
        result = runner.invoke(main, list(args), env=env, catch_exceptions=False)
        assert expect is None or result.exit_code == expect, (result.stdout, result.stderr)
        return result

    return invoke


def test_submit_wait_prints_the_result(worker: Any, cli: Any) -> None:
    result = cli("submit", "demo.sleep", "seconds=0.3", "steps=3", "--wait")
    assert json.loads(result.stdout) == {"slept": 0.3}
    assert "Submitted demo.sleep" in result.stderr
    assert "slept 0.3s of 0.3s" in result.stderr  # the progress bar's last description


def test_submit_then_status_list_and_watch(worker: Any, cli: Any) -> None:
    job_id = cli("submit", "demo.export", "rows=5").stdout.strip()
    watched = cli("watch", job_id)
    assert json.loads(watched.stdout)["rows"] == 5
    status = json.loads(cli("status", job_id, "--json").stdout)
    assert status["status"] == "completed" and status["result"]["rows"] == 5
    assert "demo.export" in cli("status", job_id).stdout
    listed = json.loads(cli("list", "--json", "--status", "completed").stdout)
    assert job_id in [j["taskId"] for j in listed["jobs"]]
    assert job_id in cli("list").stdout


def test_params_are_typed_by_the_schema(cli: Any) -> None:
    schema = {"properties": {"order_id": {"type": "string"}, "amount": {"type": "number"},
                             "ok": {"type": "boolean"}}}
    assert parse_pairs(["order_id=123", "amount=9.5", "ok=true", "extra=[1,2]", "word=hi"], schema) == {
        "order_id": "123", "amount": 9.5, "ok": True, "extra": [1, 2], "word": "hi"}
    assert parse_pairs(["ok=false"], schema) == {"ok": False}
    # The API takes JSON booleans only; the CLI must not answer "yes" for a caller who typed something else.
    for loose in ("yes", "1", "on", "True"):
        with pytest.raises(click.BadParameter, match="use true or false"):
            parse_pairs([f"ok={loose}"], schema)
    bad = cli("submit", "demo.export", "rows=many", expect=2)
    assert "not a valid integer" in bad.stderr
    unknown = cli("submit", "no.such", expect=2)
    assert "unknown operation" in unknown.stderr


def test_answer_resumes_a_parked_job(worker: Any, cli: Any) -> None:
    parked = cli("submit", "demo.refund", "order_id=77", "amount=5", "--wait", expect=EXIT_INPUT_REQUIRED)
    assert "waiting for input" in parked.stderr
    job_id = parked.stderr.split("tasks-backend answer ")[1].split()[0]
    answered = cli("answer", job_id, "approved=true", "reason=fine", "--wait")
    result = json.loads(answered.stdout)
    assert result["status"] == "approved" and result["orderId"] == "77"
    again = cli("answer", job_id, "approved=false", expect=1)
    assert "not waiting for input" in again.stderr


def test_cancel_and_a_failed_job(worker: Any, cli: Any, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    job_id = cli("submit", "test.spin", f"ledger={ledger}").stdout.strip()
    wait_until(ledger.exists, 30, message="the job to start")
    assert "Cancel requested" in cli("cancel", job_id).stderr
    wait_until(lambda: json.loads(cli("status", job_id, "--json", expect=None).stdout)["status"] == "cancelled",
               30, message="the job to stop")
    assert "cancelled" in cli("status", job_id, expect=1).stdout
    assert "already finished" in cli("cancel", job_id, expect=1).stderr
    failed = cli("submit", "demo.fail", "message=no luck", "--wait", expect=1)
    assert "no luck" in failed.stderr


def test_status_exit_codes_match_watch(worker: Any, cli: Any) -> None:
    parked = cli("submit", "demo.refund", "order_id=78", "amount=5", "--wait", expect=EXIT_INPUT_REQUIRED)
    job_id = parked.stderr.split("tasks-backend answer ")[1].split()[0]
    assert "input_required" in cli("status", job_id, expect=EXIT_INPUT_REQUIRED).stdout
    cli("status", job_id, "--json", expect=EXIT_INPUT_REQUIRED)
    cli("watch", job_id, expect=EXIT_INPUT_REQUIRED)
    cli("answer", job_id, "approved=true", "--wait")
    cli("status", job_id, expect=0)


def test_list_piped_keeps_whole_values(worker: Any, cli: Any) -> None:
    parked = cli("submit", "demo.refund", "order_id=79", "amount=5", "--wait", expect=EXIT_INPUT_REQUIRED)
    job_id = parked.stderr.split("tasks-backend answer ")[1].split()[0]
    lines = cli("list", "--limit", "5").stdout.splitlines()
    assert lines[0].split("\t") == ["taskId", "operation", "status", "statusMessage", "lastUpdatedAt"]
    row = next(line.split("\t") for line in lines if line.startswith(job_id))
    assert row[1:3] == ["demo.refund", "input_required"]
    assert row[3] == "Approve a refund of 5.00 for order 79?"


def test_operations_lists_schemas(cli: Any) -> None:
    ops = json.loads(cli("operations", "--json").stdout)
    assert {"demo.sleep", "demo.export", "demo.refund", "demo.fail"} <= {o["name"] for o in ops}
    assert "order_id?:string" in cli("operations").stdout or "order_id:string" in cli("operations").stdout


def test_clear_errors_without_a_server_or_token(live_url: str) -> None:
    runner = CliRunner()
    missing = runner.invoke(main, ["list"], env={"TASKS_BACKEND_URL": live_url, "TASKS_BACKEND_TOKEN": ""})
    assert missing.exit_code == 2 and "TASKS_BACKEND_TOKEN" in missing.stderr
    refused = runner.invoke(main, ["list", "--url", live_url, "--token", "wrong"])
    assert refused.exit_code == 1 and "refused the token" in refused.stderr
    down = runner.invoke(main, ["list", "--url", "http://127.0.0.1:9", "--token", "x"])
    assert down.exit_code == 1 and "Cannot reach http://127.0.0.1:9" in down.stderr
    gone = runner.invoke(main, ["status", "00000000-0000-4000-8000-000000000000", "--url", live_url,
                                "--token", "alice-token"])
    assert gone.exit_code == 1 and "No such job" in gone.stderr


def test_token_add_prints_once_and_stores_a_digest(tmp_path: Path, flask_app: Any) -> None:
    path = tmp_path / "tokens"
    result = CliRunner().invoke(main, ["token", "add", "carol"], env={"TASKS_BACKEND_TOKENS_FILE": str(path)})
    assert result.exit_code == 0, result.stderr
    token = result.stdout.strip()
    text = path.read_text()
    assert token not in text
    assert parse_token_file(text) == [("carol", token_digest(token))]
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    bad = CliRunner().invoke(main, ["token", "add", "a:b"], env={"TASKS_BACKEND_TOKENS_FILE": str(path)})
    assert bad.exit_code == 2


def test_the_installed_command_runs(worker: Any, live_url: str, user: tuple[str, str]) -> None:
    env = {**os.environ, "TASKS_BACKEND_URL": live_url, "TASKS_BACKEND_TOKEN": user[1]}
    proc = subprocess.run([sys.executable, "-m", "tasks_backend.cli", "submit", "test.noop", "--wait"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"ok": True}
    assert user[1] not in proc.stderr


def _in_a_terminal(args: list[str], env: dict[str, str], columns: int) -> list[str]:
    """`tasks-backend ARGS` as a real process on a pseudo-terminal `columns` wide; its screen lines, styles removed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([sys.executable, "-m", "tasks_backend.cli", *args], env=env, stdin=follower,
                            stdout=follower,
                            stderr=follower, close_fds=True)
    os.close(follower)
    out = b""
    with contextlib.suppress(OSError):  # EIO once the process has gone and the terminal is closed
        while chunk := os.read(leader, 65536):
            out += chunk
    os.close(leader)
    assert proc.wait(60) == 0, out.decode(errors="replace")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode(errors="replace"))
    return [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]


@pytest.mark.parametrize("columns", [80, 160])
def test_list_in_a_terminal_keeps_every_header_and_whole_values(worker: Any, cli: Any, live_url: str,
                                                                user: tuple[str, str], columns: int) -> None:
    """At 80 columns the message's header was dropped and the times cut; each job now takes two lines there."""
    parked = cli("submit", "demo.refund", "order_id=79", "amount=5", "--wait", expect=EXIT_INPUT_REQUIRED)
    job_id = parked.stderr.split("tasks-backend answer ")[1].split()[0]
    cli("submit", "demo.sleep", "seconds=0", "steps=1", "--wait")
    env = {**os.environ, "TASKS_BACKEND_URL": live_url, "TASKS_BACKEND_TOKEN": user[1]}
    lines = _in_a_terminal(["list"], env, columns)
    assert max(map(len, lines)) <= columns, "\n".join(lines)
    screen = "\n".join(lines)
    for name in ("taskId", "operation", "status", "statusMessage", "lastUpdatedAt"):
        assert name in screen, screen
    for job in json.loads(cli("list", "--json").stdout)["jobs"]:
        for value in (job["taskId"], job["operation"], job["status"], job["lastUpdatedAt"]):
            assert value in screen, (value, screen)
    row = next(i for i, line in enumerate(lines) if job_id in line)
    if columns >= 160:  # wide enough: one line a job, the message whole
        assert "demo.refund" in lines[row] and "Approve a refund of 5.00 for order 79?" in lines[row]
    else:
        assert lines[row + 1].split()[0] == "demo.refund" and "Approve" in lines[row]


def test_submit_later_and_with_a_priority(worker: Any, cli: Any) -> None:
    """--delay and --run-at hold the start back (the handle says until when), --priority ranks the job; the
    spelling is checked before any request, the time by the server."""
    def handle(job_id: str) -> dict[str, Any]:
        return json.loads(cli("status", job_id, "--json").stdout)  # type: ignore[no-any-return]

    def at(text: str) -> dt.datetime:
        return dt.datetime.fromisoformat(text)

    later = handle(cli("submit", "demo.sleep", "seconds=0.1", "--delay", "2s", "--priority", "7").stdout.strip())
    assert later["status"] == "working" and "Waiting to start" in later["statusMessage"]
    assert later["priority"] == 7
    assert 1.9 <= (at(later["runAt"]) - at(later["createdAt"])).total_seconds() <= 2.1
    wait_until(lambda: handle(later["taskId"])["status"] == "completed", 15, interval=0.2,
               message="the delayed job to run")
    brief = handle(cli("submit", "test.noop", "--delay", "500ms").stdout.strip())
    assert 0.45 <= (at(brief["runAt"]) - at(brief["createdAt"])).total_seconds() <= 0.55
    when = (dt.datetime.now(dt.UTC) + dt.timedelta(minutes=10)).replace(microsecond=0)
    fixed = handle(cli("submit", "test.noop", "--run-at", when.isoformat().replace("+00:00", "Z")).stdout.strip())
    assert at(fixed["runAt"]) == when and fixed["priority"] == 5
    cli("cancel", fixed["taskId"], expect=None)
    for args, said in ((["--delay", "1s", "--run-at", when.isoformat()], "not both"),
                       (["--delay", "soon"], "not a duration"), (["--run-at", "2030-01-01T09:00:00"], "not a time"),
                       (["--priority", "10"], "--priority")):
        assert said in cli("submit", "test.noop", *args, expect=2).stderr, args
    too_late = cli("submit", "test.noop", "--run-at", "2999-01-01T00:00:00Z", expect=1)
    assert "422" in too_late.stderr and "runAt" in too_late.stderr
