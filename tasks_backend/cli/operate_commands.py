"""`cancel` and `rerun`: one job by id, or (with filter options) every job a filter matches, as a bulk action.

A bulk action first runs as a dry run to count the jobs, asks for a confirmation naming the count (`--yes` skips
it), then starts the bulk job and follows it with a progress bar on stderr; its counts go to stdout as JSON.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

import click

from tasks_backend.client import Client

from .client_commands import _err, follow, server_options

F = TypeVar("F", bound=Callable[..., Any])
_SPAN = re.compile(r"^(\d+)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def since_to_rfc3339(span: str, now: dt.datetime | None = None) -> str:
    """`90s`, `30m`, `1h`, `2d` before now, as RFC 3339 UTC."""
    found = _SPAN.match(span.strip())
    if not found:
        raise click.BadParameter("use a number and a unit: 90s, 30m, 1h or 2d", param_hint="--since")
    start = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(seconds=int(found[1]) * _UNIT_S[found[2]])
    return start.strftime("%Y-%m-%dT%H:%M:%SZ")


def filter_options(fn: F) -> F:
    """The filter of a bulk action (`service.filters`' fields)."""
    options = [
        click.option("--status", "status_", default=None, help="failed, cancelled, working... (comma-separated)"),
        click.option("--operation", default=None, help="only jobs of this operation"),
        click.option("--since", default=None, help="only jobs created in the last 90s, 30m, 1h, 2d..."),
        click.option("--owner", default=None, help="another owner's jobs, or * for every owner's (operators)"),
        click.option("--dry-run", is_flag=True, help="print what would be done; do nothing"),
        click.option("--yes", "-y", is_flag=True, help="do not ask for a confirmation"),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _filter(status_: str | None, operation: str | None, since: str | None, owner: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if status_:
        out["status"] = status_
    if operation:
        out["operation"] = operation
    if since:
        out["createdAfter"] = since_to_rfc3339(since)
    if owner:
        out["owner"] = owner
    return out


def bulk_action(client: Client, action: str, flt: dict[str, Any], *, dry_run: bool, yes: bool,
                keep_steps: bool = False) -> None:
    """Count with a dry run, confirm, then act and follow the bulk job to its end."""
    preview = client.wait(client.bulk(action, flt, dry_run=True).id)
    if preview.status != "completed":
        raise click.ClickException(f"The dry run ended {preview.status}: {(preview.error or {}).get('message', '')}")
    count = int(preview.result["matched"])
    if dry_run:
        click.echo(json.dumps(preview.result, separators=(",", ":")))
        return
    if count == 0:
        _err().print("No job matches.")
        return
    if not yes:
        click.confirm(f"{action.capitalize()} {count} job{'s' * (count != 1)}?", default=False, abort=True,
                      err=True)
    job = follow(client, client.bulk(action, flt, keep_steps=keep_steps))
    if job.status != "completed":
        raise click.ClickException(f"The bulk job {job.id} ended {job.status}.")
    result = job.result
    _err().print(f"{action.capitalize()}: {result['done']} done, {result['skipped']} skipped of "
                 f"{result['matched']} matched (bulk job {job.id}).")
    click.echo(json.dumps({k: result[k] for k in ("matched", "done", "skipped", "ids", "newIds")},
                          separators=(",", ":")))


def _one_or_filter(job_id: str | None, flt: dict[str, Any], command: str) -> None:
    if job_id and flt:
        raise click.UsageError(f"Give a job id or filter options to `{command}`, not both.")
    if not job_id and not flt:
        raise click.UsageError(f"Give `{command}` a job id, or filter options (--status, --operation, --since).")


@click.command()
@click.argument("job_id", required=False)
@filter_options
@server_options
def cancel(client: Client, job_id: str | None, status_: str | None, operation: str | None, since: str | None,
           owner: str | None, dry_run: bool, yes: bool) -> None:
    """Ask a job to stop (a running job stops at its next cancellation point), or every job the filter options
    match."""
    flt = _filter(status_, operation, since, owner)
    _one_or_filter(job_id, flt, "cancel")
    if job_id:
        job = client.cancel(job_id)
        _err().print(f"Cancel requested; {job.id} is {job.status}")
        return
    bulk_action(client, "cancel", flt, dry_run=dry_run, yes=yes)


@click.command()
@click.argument("job_id", required=False)
@click.option("--keep-steps", is_flag=True, help="the steps the original recorded count as done")
@filter_options
@server_options
def rerun(client: Client, job_id: str | None, keep_steps: bool, status_: str | None, operation: str | None,
          since: str | None, owner: str | None, dry_run: bool, yes: bool) -> None:
    """Rerun a failed or cancelled job as a new one, or every failed or cancelled job the filter options match."""
    flt = _filter(status_, operation, since, owner)
    _one_or_filter(job_id, flt, "rerun")
    if job_id:
        job = client.rerun(job_id, keep_steps=keep_steps)
        _err().print(f"Rerun of {job_id} started: {job.id} is {job.status}")
        click.echo(job.id)
        return
    bulk_action(client, "rerun", flt, dry_run=dry_run, yes=yes, keep_steps=keep_steps)
