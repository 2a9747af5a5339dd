"""The commands that talk to a running server: submit, status, watch, list, answer, operations (cancel and rerun in
`operate_commands`),
plus `token add`, which only writes the tokens file.

Each talks to `--url`/`--token` (or `TASKS_BACKEND_URL`/`TASKS_BACKEND_TOKEN`) through
`tasks_backend.client`, so the CLI sees the same typed errors as any other caller. Results go to
stdout as JSON; progress, notes and errors go to stderr, so `tasks-backend submit ... --wait | jq`
works.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click
from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column, Table

from tasks_backend.access.auth import token_digest
from tasks_backend.client import DEFAULT_URL, Client, Job, ServerUnreachable
from tasks_backend.errors import TasksBackendError, Unauthenticated

from .timing import timing_options

F = TypeVar("F", bound=Callable[..., Any])

#: Exit status when a job ended failed or cancelled (errors talking to the server exit with 1 too).
EXIT_JOB_FAILED = 1
#: Exit status of `--wait`, `watch` and `status` when the job stopped to ask for input.
EXIT_INPUT_REQUIRED = 3


def exit_status(job: Job) -> int:
    """How a job's state reads as an exit status; every command that shows one job uses it."""
    if job.status in ("failed", "cancelled"):
        return EXIT_JOB_FAILED
    if job.status == "input_required":
        return EXIT_INPUT_REQUIRED
    return 0


def _out() -> Console:
    return Console(soft_wrap=True)


def _err() -> Console:
    return Console(stderr=True, soft_wrap=True)


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


# -- connection options and error handling ---------------------------------------------------------
def server_options(fn: F) -> F:
    """`--url` and `--token` (with their environment variables), turned into a `client` argument."""

    @click.option("--url", envvar="TASKS_BACKEND_URL", default=DEFAULT_URL, show_default=True,
                  help="server base URL [env TASKS_BACKEND_URL]")
    @click.option("--token", envvar="TASKS_BACKEND_TOKEN", default=None, show_default=False,
                  help="bearer token [env TASKS_BACKEND_TOKEN]")
    @functools.wraps(fn)
    def wrapper(url: str, token: str | None, **kwargs: Any) -> Any:
        if not token:
            raise click.UsageError("No token: pass --token or set TASKS_BACKEND_TOKEN.")
        with Client(url, token, timeout=30.0) as client:
            try:
                return fn(client, **kwargs)
            except ServerUnreachable as exc:
                raise click.ClickException(f"{exc.detail} (is the server running? check --url)") from exc
            except Unauthenticated as exc:
                raise click.ClickException(f"{url} refused the token (401): check --token.") from exc
            except TasksBackendError as exc:
                raise click.ClickException(_describe(exc)) from exc

    return wrapper  # type: ignore[return-value]


def _describe(exc: TasksBackendError) -> str:
    status = getattr(exc, "status_code", None)
    text = f"{exc.detail}" + (f" (HTTP {status})" if status else "")
    errors = exc.extra.get("errors")
    if errors:
        text += "\n" + json.dumps(errors, indent=2, ensure_ascii=False)
    return text


# -- key=value arguments -----------------------------------------------------------------------------
def _coerce(raw: str, schema: Mapping[str, Any] | None) -> Any:
    """A value typed by its JSON Schema (so `order_id=123` stays a string); JSON when untyped."""
    kind = (schema or {}).get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "string":
        return raw
    if kind == "boolean":
        # Exactly what the API takes: a looser spelling here would answer a question the server refuses.
        if raw in ("true", "false"):
            return raw == "true"
        raise click.BadParameter(f"{raw!r} is not a boolean: use true or false")
    try:
        return json.loads(raw)
    except ValueError:
        if kind in ("integer", "number", "object", "array"):
            raise click.BadParameter(f"{raw!r} is not a valid {kind}") from None
        return raw


def parse_pairs(pairs: Iterable[str], schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    properties = (schema or {}).get("properties") or {}
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r}: expected key=value")
        out[key] = _coerce(raw, properties.get(key))
    return out


# -- showing jobs ------------------------------------------------------------------------------------
def _progress_of(job: Job) -> tuple[float | None, float | None]:
    progress = job.progress or {}
    return progress.get("done"), progress.get("total")


def follow(client: Client, job: Job) -> Job:
    """Show a live progress bar from the job's event stream until it settles; the last handle."""
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=_err(), transient=False) as bar:
        task = bar.add_task(job.status_message or job.status, total=None)
        last = job
        for last in client.events(job.id):
            done, total = _progress_of(last)
            bar.update(task, completed=done or 0, total=total,
                       description=last.status_message or last.status)
            if last.status == "input_required":
                break
        if last.status == "completed":
            _, total = _progress_of(last)
            bar.update(task, completed=total or 1, total=total or 1)
    return client.get(job.id) if not last.done and last.status != "input_required" else last


def finish(job: Job) -> None:
    """Print what a settled job has to say and exit with a status that says how it ended."""
    if job.status == "completed":
        _echo_json(job.result)
        return
    err = _err()
    if job.status == "input_required":
        err.print(f"[yellow]Job {job.id} is waiting for input:[/]")
        for key, req in (job.input_requests or {}).items():
            params = req.get("params", {})
            fields = ", ".join((params.get("requestedSchema") or {}).get("properties", {}))
            err.print(f"  {key}: {params.get('message', '')}  fields: {fields}")
        err.print(f"Answer with: tasks-backend answer {job.id} field=value ...")
    elif job.status == "failed":
        err.print(f"[red]Job {job.id} failed:[/] {(job.error or {}).get('message', 'no message')}")
    else:
        note = f": {job.status_message}" if job.status_message else ""
        err.print(f"[red]Job {job.id} is {job.status}[/]{note}")
    raise SystemExit(exit_status(job) or EXIT_JOB_FAILED)  # still working here: the wait gave up


def _handle_table(job: Job) -> Table:
    table = Table(show_header=False, box=None)
    done, total = _progress_of(job)
    rows = [("taskId", job.id), ("operation", job.operation or ""), ("status", job.status),
            ("statusMessage", job.status_message or ""),
            ("progress", f"{done:g}/{total:g}" if done is not None and total else ""),
            ("createdAt", job.created_at), ("lastUpdatedAt", job.last_updated_at),
            ("ttlMs", str(job.ttl_ms)), ("pollIntervalMs", str(job.poll_interval_ms))]
    for name, value in rows:
        if value:
            table.add_row(f"[bold]{name}[/]", value)
    return table


# -- commands ----------------------------------------------------------------------------------------
@click.command()
@click.argument("operation")
@click.argument("params", nargs=-1)
@click.option("--wait", "wait_", is_flag=True, help="follow the job with a progress bar and print its result")
@click.option("--idempotency-key", default=None, help="reuse to make a repeated submit return the same job")
@timing_options
@server_options
def submit(client: Client, operation: str, params: tuple[str, ...], wait_: bool, idempotency_key: str | None,
           priority: int | None, delay: float | None, run_at: str | None) -> None:
    """Submit OPERATION with key=value params (typed by the operation's schema), now or later (--delay, --run-at)."""
    if delay is not None and run_at is not None:
        raise click.UsageError("Give --delay or --run-at, not both.")
    schemas = {op["name"]: op.get("paramsSchema") for op in client.operations()}
    if operation not in schemas:
        raise click.BadParameter(f"unknown operation {operation!r}; known: {', '.join(sorted(schemas))}",
                                 param_hint="OPERATION")
    job = client.submit(operation, parse_pairs(params, schemas[operation]), idempotency_key=idempotency_key,
                        run_at=run_at, delay=delay, priority=priority)
    if not wait_:
        click.echo(job.id)
        return
    _err().print(f"Submitted {operation} as {job.id}")
    finish(follow(client, job))


@click.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="print the handle as JSON")
@server_options
def status(client: Client, job_id: str, as_json: bool) -> None:
    """Show a job's handle, and its result, error or open input requests.

    Exits 0 while the job works or once it completed, 1 if it failed or was cancelled, 3 if it waits
    for input (as `--wait` and `watch` do)."""
    job = client.get(job_id)
    if as_json:
        _echo_json(job.raw)
    else:
        out = _out()
        out.print(_handle_table(job))
        for name, value in (("result", job.result), ("error", job.error),
                            ("inputRequests", job.input_requests)):
            if value is not None:
                out.print(f"[bold]{name}[/]")
                out.print_json(json.dumps(value))
    if exit_status(job):
        raise SystemExit(exit_status(job))


@click.command()
@click.argument("job_id")
@server_options
def watch(client: Client, job_id: str) -> None:
    """Follow a job with a progress bar until it finishes or asks for input."""
    finish(follow(client, client.get(job_id)))


@click.command(name="list")
@click.option("--status", "status_", default=None,
              help="working, input_required, completed, failed or cancelled")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 200))
@click.option("--cursor", default=None, help="nextCursor from a previous page")
@click.option("--json", "as_json", is_flag=True, help="print the page as JSON")
@server_options
def list_jobs(client: Client, status_: str | None, limit: int, cursor: str | None, as_json: bool) -> None:
    """List your jobs, newest first."""
    page = client.list(status=status_, limit=limit, cursor=cursor)
    if as_json:
        _echo_json({"jobs": [j.raw for j in page.jobs], "nextCursor": page.next_cursor})
        return
    rows = [(job.id, job.operation or "", job.status, job.status_message or "", job.last_updated_at)
            for job in page.jobs]
    header = ("taskId", "operation", "status", "statusMessage", "lastUpdatedAt")
    more = f"More: tasks-backend list --cursor {page.next_cursor}" if page.next_cursor else ""
    if not _out().is_terminal:
        # Piped: whole values, one job a line, tab-separated, for cut/awk (a table would be cut to fit).
        for row in (header, *rows):
            click.echo("\t".join(" ".join(value.split()) for value in row))
        if more:
            click.echo(more, err=True)
        return
    out = _out()
    out.print(_jobs_table(header, rows, out.width))
    if more:
        out.print(more)


#: The least room the message gets beside the other columns before each job takes two lines.
MIN_MESSAGE_WIDTH = 16


Row = tuple[str, str, str, str, str]  # taskId, operation, status, statusMessage, lastUpdatedAt


def _jobs_table(header: Row, rows: list[Row], width: int) -> Table:
    """Ids, names, states and times whole, never cut; only the free-text message gives way. One line a job
    where that leaves the message room; in a narrower terminal (80 columns), two, so that it still does."""
    whole = {i: max(len(r[i]) for r in (header, *rows)) for i in (0, 1, 2, 4)}
    # No frame: columns are set apart by three spaces (a divider and the padding), nothing at the edges.
    look: dict[str, Any] = {"box": box.SIMPLE_HEAD, "show_edge": False, "pad_edge": False}
    if sum(whole.values()) + 3 * 4 + MIN_MESSAGE_WIDTH <= width:
        table = Table(*(Column(header[i], no_wrap=True, min_width=whole[i]) for i in (0, 1, 2)),
                      Column(header[3], overflow="ellipsis", ratio=1),
                      Column(header[4], no_wrap=True, min_width=whole[4]), **look)
        for row in rows:
            table.add_row(*row)
        return table
    table = Table(Column(f"{header[0]}\n{header[1]}", no_wrap=True, min_width=max(whole[0], whole[1])),
                  Column(f"{header[2]}\n{header[4]}", no_wrap=True, min_width=max(whole[2], whole[4])),
                  Column(header[3], overflow="fold", ratio=1), show_lines=True, **look)  # a blank line between jobs
    for job_id, operation, state, message, updated in rows:
        table.add_row(f"{job_id}\n{operation}", f"{state}\n{updated}", message)
    return table


@click.command()
@click.argument("job_id")
@click.argument("fields", nargs=-1, required=True)
@click.option("--request", "request_key", default=None, help="which input request (when several are open)")
@click.option("--wait", "wait_", is_flag=True, help="then follow the job as `watch` does")
@server_options
def answer(client: Client, job_id: str, fields: tuple[str, ...], request_key: str | None,
           wait_: bool) -> None:
    """Answer a job waiting for input with field=value pairs (typed by the request's schema)."""
    job = client.get(job_id)
    requests = job.input_requests or {}
    if job.status != "input_required" or not requests:
        raise click.ClickException(f"Job {job_id} is {job.status}, not waiting for input.")
    if request_key is None:
        if len(requests) > 1:
            open_keys = ", ".join(requests)
            raise click.UsageError(f"Several requests are open ({open_keys}): pick one with --request.")
        request_key = next(iter(requests))
    if request_key not in requests:
        raise click.BadParameter(f"no open request {request_key!r}; open: {', '.join(requests)}",
                                 param_hint="--request")
    schema = requests[request_key].get("params", {}).get("requestedSchema")
    job = client.answer(job_id, {request_key: parse_pairs(fields, schema)})
    if wait_:
        finish(follow(client, job))
        return
    _err().print(f"Answered {request_key}; {job.id} is {job.status}")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="print the operations with their JSON Schemas")
@server_options
def operations(client: Client, as_json: bool) -> None:
    """List the operations the server runs, with their parameters."""
    ops = client.operations()
    if as_json:
        _echo_json(ops)
        return
    table = Table("operation", "params", "description")
    for op in ops:
        schema = op.get("paramsSchema") or {}
        required = set(schema.get("required") or [])
        params = ", ".join(f"{name}{'' if name in required else '?'}:{prop.get('type', 'any')}"
                           for name, prop in (schema.get("properties") or {}).items())
        table.add_row(op["name"], params, op.get("description") or "")
    _out().print(table)


@click.group()
def token() -> None:
    """Manage the bearer tokens in TASKS_BACKEND_TOKENS_FILE."""


@token.command("add")
@click.argument("principal")
@click.option("--file", "path", envvar="TASKS_BACKEND_TOKENS_FILE", required=True,
              help="tokens file [env TASKS_BACKEND_TOKENS_FILE]")
def token_add(principal: str, path: str) -> None:
    """Make a token for PRINCIPAL: print it once, store only its SHA-256 digest."""
    if not principal or any(c in principal for c in ":\n\r#") or principal != principal.strip():
        raise click.BadParameter("a principal is a name without ':', '#', spaces at the ends or newlines")
    new = secrets.token_urlsafe(32)
    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    # Created private; the digest alone does not reveal the token, but the file still says who may call.
    fd = os.open(file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        fh.write(f"{principal}:{token_digest(new)}\n")
    _err().print(f"Added a token for {principal} to {file}. It is shown once; keep it somewhere safe:")
    click.echo(new)


def register_client_commands(group: click.Group) -> None:
    for command in (submit, status, watch, list_jobs, answer, operations, token):
        group.add_command(command)
