"""`tasks-backend audit`: who did what, from the server's audit trail (`GET /v1/audit`), as a table.

Like the other client commands (`client_commands`): `--url`/`--token` or their environment variables. An admin
or operator sees every entry; anyone else the entries about their own jobs and schedules.
"""

from __future__ import annotations

from typing import Any

import click
from rich import box
from rich.table import Table

from tasks_backend.client import Client

from .client_commands import _echo_json, _out, server_options


@click.command()
@click.option("--job", default=None, help="entries about this job")
@click.option("--principal", default=None, help="entries of what this principal did")
@click.option("--since", default=None, help="an RFC 3339 time, or a duration back from now: 90s, 15m, 1h, 7d")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 200))
@click.option("--cursor", default=None, help="nextCursor from a previous page")
@click.option("--json", "as_json", is_flag=True, help="print the page as JSON")
@server_options
def audit(client: Client, job: str | None, principal: str | None, since: str | None, limit: int,
          cursor: str | None, as_json: bool) -> None:
    """Who cancelled, answered, changed schedules or push configs, or signed in: newest first."""
    page = client.audit(job=job, principal=principal, since=since, cursor=cursor, limit=limit)
    if as_json:
        _echo_json(page)
        return
    header = ("at", "principal", "action", "on", "detail", "address", "requestId")
    rows = [(e["at"], e["principal"], e["action"], _on(e), e.get("detail", ""), e.get("address", ""),
             e.get("requestId", "")) for e in page["entries"]]
    more = f"More: tasks-backend audit --cursor {page['nextCursor']}" if page.get("nextCursor") else ""
    out = _out()
    if not out.is_terminal:
        # Piped: whole values, one entry a line, tab-separated, for cut/awk (a table would be cut to fit).
        for row in (header, *rows):
            click.echo("\t".join(row))
        if more:
            click.echo(more, err=True)
        return
    table = Table(*header, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for row in rows:
        table.add_row(*row)
    out.print(table)
    if more:
        out.print(more)


def _on(entry: dict[str, Any]) -> str:
    """The job, the schedule or config acted on, or both (a push config: its job and its id)."""
    return " ".join(part for part in (entry.get("jobId"), entry.get("target")) if part)
