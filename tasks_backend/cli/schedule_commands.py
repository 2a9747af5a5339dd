"""`tasks-backend schedule add|list|rm|pause|resume`: recurring jobs on a running server, over its HTTP API.

Like the other client commands (`client_commands`): `--url`/`--token` or their environment variables, results
on stdout (a schedule as JSON, or a table), notes and errors on stderr.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table

from tasks_backend.client import Client

from .client_commands import _echo_json, _err, _out, parse_pairs, server_options


@click.group()
def schedule() -> None:
    """Recurring jobs: define, list, delete, pause and resume schedules."""


@schedule.command("add")
@click.argument("name")
@click.argument("operation")
@click.argument("params", nargs=-1)
@click.option("--cron", default=None, help='a cron expression, e.g. "*/5 * * * *"')
@click.option("--every", type=int, default=None, help="or: every this many seconds")
@click.option("--timezone", default=None, help="IANA time zone of the cron expression (default UTC)")
@click.option("--catch-up", type=click.Choice(["none", "latest", "all"]), default=None,
              help="what ticks missed while nothing ran get (default latest)")
@click.option("--priority", type=click.IntRange(0, 9), default=None, help="0 to 9 (default 5)")
@server_options
def add(client: Client, name: str, operation: str, params: tuple[str, ...], cron: str | None, every: int | None,
        timezone: str | None, catch_up: str | None, priority: int | None) -> None:
    """Run OPERATION with key=value params at every tick of --cron or --every seconds, as schedule NAME."""
    if (cron is None) == (every is None):
        raise click.UsageError("Give --cron or --every (not both).")
    schemas = {op["name"]: op.get("paramsSchema") for op in client.operations()}
    body: dict[str, Any] = {"name": name, "operation": operation,
                            "params": parse_pairs(params, schemas.get(operation))}
    for key, value in (("cron", cron), ("everySeconds", every), ("timezone", timezone), ("catchUp", catch_up),
                       ("priority", priority)):
        if value is not None:
            body[key] = value
    _echo_json(client.add_schedule(body))


@schedule.command("list")
@click.option("--json", "as_json", is_flag=True, help="print the schedules as JSON")
@click.option("--page-size", type=click.IntRange(1, 200), default=200, show_default=True,
              help="schedules asked for per request (every page is read)")
@server_options
def list_schedules(client: Client, as_json: bool, page_size: int) -> None:
    """List your schedules, oldest first (all of them: the pages are followed)."""
    schedules = client.schedules(page_size)
    if as_json:
        _echo_json(schedules)
        return
    header = ("name", "operation", "when", "paused", "nextRunAt", "lastJobId")
    rows = [(s["name"], s["operation"],
             f"{s['cron']} ({s['timezone']})" if s.get("cron") else f"every {s['everySeconds']}s",
             "yes" if s["paused"] else "no", s["nextRunAt"], s.get("lastJobId") or "") for s in schedules]
    if not _out().is_terminal:  # piped: one schedule a line, tab-separated
        for row in (header, *rows):
            click.echo("\t".join(row))
        return
    table = Table(*header)
    for row in rows:
        table.add_row(*row)
    _out().print(table)


@schedule.command("rm")
@click.argument("name")
@server_options
def remove(client: Client, name: str) -> None:
    """Delete schedule NAME: no more ticks (the jobs it made stay)."""
    client.delete_schedule(name)
    _err().print(f"Deleted schedule {name}")


@schedule.command("pause")
@click.argument("name")
@server_options
def pause(client: Client, name: str) -> None:
    """Pause schedule NAME: its ticks make no jobs until it is resumed."""
    click.echo(json.dumps(client.pause_schedule(name), indent=2, ensure_ascii=False))


@schedule.command("resume")
@click.argument("name")
@server_options
def resume(client: Client, name: str) -> None:
    """Resume schedule NAME from its next tick (ticks that fell while paused get nothing)."""
    click.echo(json.dumps(client.resume_schedule(name), indent=2, ensure_ascii=False))
