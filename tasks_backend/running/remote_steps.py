"""`ctx.call_tool` and `ctx.send_message`: another agent's task as a durable step of this job.

The remote task is created inside a recorded step (`remote:N`, holding its reference), so a replay reads the
reference instead of creating another; the create carries a key derived from the job and the step (A2A's
messageId, MCP `_meta` idempotency key), so a remote that deduplicates by it makes one task even when this
worker dies between the create and the record. A remote that does not deduplicate may get the create twice in
that window (at most twice: the record is written before anything else can replay it). The job then parks,
holding no worker; `remote.polling` wakes it when the task ends or asks for input, and the end is recorded
(`remote:N:done`) so later replays neither poll nor ask again.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from ..errors import StoreUnavailable
from ..model.questions import TIMEOUT_ACTION
from ..remote.access import RemoteError
from ..remote.client import Remotes
from ..remote.push import push_config
from ..remote.status import DEFAULT_POLL_MS, RemoteTaskFailed, Status
from ..store.connect import through_outage
from ..store.fields import Change
from ..store.jobs import RedisStore
from ..store.remotes import DONE
from .parking import _Suspend


class _Ctx(Protocol):
    """What these steps use of the job context (`context.JobContext`)."""

    job_id: str
    _store: RedisStore
    _tolerance: float
    _executor: Any

    def _next(self, kind: str) -> str: ...
    def step(self, name: str, fn: Callable[[], Any]) -> Any: ...
    def check_cancelled(self) -> None: ...
    def idempotency_key(self, name: str) -> str: ...
    def ask_all(self, questions: dict[str, tuple[str, Any]], *, to: Sequence[str] | None = None,
                deadline: dt.timedelta | None = None, on_timeout: Any = "fail") -> dict[str, Any]: ...


@dataclass(frozen=True)
class Routing:
    """Whom the remote's questions go to, and until when: as `ctx.ask` takes them."""

    to: Sequence[str] | None = None
    deadline: dt.timedelta | None = None
    on_timeout: Any = "fail"

#: A job waiting on a remote is run again after this long even if no poller woke it (ms): it then looks itself.
#: The pollers' schedule is the way a job is woken; this only bounds a wait should that schedule lose its entry.
BACKSTOP_MS = 300_000


class RemoteSteps:
    """The remote-task methods of `JobContext` (kept apart for size; they use its steps and parking)."""

    def call_tool(self, server_url: str, tool: str, arguments: dict[str, Any] | None = None, *,
                  to: Sequence[str] | None = None, deadline: dt.timedelta | None = None,
                  on_timeout: Any = "fail") -> Any:
        """Run `tool` on the MCP server at `server_url` as a task and return its result (`structuredContent`,
        else its text, parsed as JSON when it is). Raises `RemoteTaskFailed` if the task failed or was cancelled
        (a tool result with `isError` counts as failed). The job holds no worker while the task runs.
        `to`, `deadline`, `on_timeout`: where the remote's questions go and until when, as for `ctx.ask`."""
        ctx = cast(_Ctx, self)
        return _await_remote(ctx, ctx._next("remote"), server_url,
                             lambda r, key: r.mcp.create(server_url, tool, arguments or {}, key),
                             Routing(to, deadline, on_timeout))

    def send_message(self, agent_url: str, message: Any, *, to: Sequence[str] | None = None,
                     deadline: dt.timedelta | None = None, on_timeout: Any = "fail") -> Any:
        """Send an A2A 1.0 message to the agent at `agent_url` (its JSON-RPC endpoint) and return what the task
        produced (one artifact part's data or text; several parts as a list), or the agent's reply message.
        Raises `RemoteTaskFailed` if the task failed, was rejected or cancelled. `to`, `deadline`, `on_timeout`:
        as for `call_tool`."""
        ctx = cast(_Ctx, self)
        name = ctx._next("remote")

        def create(r: Remotes, key: str) -> dict[str, Any]:
            push = push_config(ctx._executor.settings, ctx._store, ctx.job_id)
            return r.a2a.create(agent_url, message, key, push)

        return _await_remote(ctx, name, agent_url, create, Routing(to, deadline, on_timeout))


def _await_remote(ctx: _Ctx, name: str, url: str, create: Callable[[Remotes, str], dict[str, Any]],
                  routing: Routing) -> Any:
    store, tolerance = ctx._store, ctx._tolerance
    raw = through_outage(lambda: store.recorded_step(ctx.job_id, name + DONE), tolerance)
    if raw is not None:
        done = json.loads(raw)
        ref = json.loads(through_outage(lambda: store.recorded_step(ctx.job_id, name), tolerance) or "{}")
    else:
        remotes = Remotes(ctx._executor.settings)
        try:
            remotes.guard(url)
            ref = ctx.step(name, lambda: _create(ctx, remotes, name, url, create))
            try:
                done = _follow(ctx, remotes, name, ref, routing)
            except Exception:
                # The job may fail with the task open (a question past its deadline, say): the watch then
                # cancels the task, as it does a cancelled job's (it looks at a job still running later).
                with contextlib.suppress(StoreUnavailable):
                    store.watch_remote(ctx.job_id, 0)
                raise
        finally:
            remotes.close()
    if "failed" in done:
        failed = done["failed"]
        raise RemoteTaskFailed(url, ref.get("taskId"), failed["state"], failed.get("message"), failed.get("error"))
    return done["result"]


def _create(ctx: _Ctx, remotes: Remotes, name: str, url: str,
            create: Callable[[Remotes, str], dict[str, Any]]) -> dict[str, Any]:
    """Create the remote task and keep its reference where a cancel finds it, before the step records it (a
    cancel in between must still reach the task)."""
    try:
        ref = create(remotes, ctx.idempotency_key(name))
    except RemoteError as exc:
        if exc.code is None:
            raise  # unreachable or not JSON-RPC: the job fails (or retries, if it retries on RemoteError)
        # The remote refused the request (unknown tool, bad arguments): the task never existed.
        return {"protocol": "refused", "url": url, "taskId": None,
                "final": Status("rejected", message=str(exc), error={"code": exc.code}).to_json()}
    if "final" not in ref:
        poll = int(ref.get("pollMs") or DEFAULT_POLL_MS)
        through_outage(lambda: ctx._store.remember_remote(ctx.job_id, name, ref, poll), ctx._tolerance)
    return ref


def _follow(ctx: _Ctx, remotes: Remotes, name: str, ref: dict[str, Any], routing: Routing) -> dict[str, Any]:
    """The recorded outcome of the remote task, or park the job until it has one (or ask its question)."""
    status: Status | None
    try:
        status = remotes.get(ref)
    except RemoteError:
        status = None  # unreachable for now: the poller looks again
    if status is not None and status.state == "input_required":
        status = _relay_input(ctx, remotes, name, ref, status, routing)
    if status is None or not status.terminal:
        poll = (status.poll_ms if status is not None else None) or ref.get("pollMs") or DEFAULT_POLL_MS
        if ref.get("protocol") == "mcp-2026":
            poll = 0  # looked at at once, which starts listening to it (`remote.listening`); then at its interval
        through_outage(lambda: ctx._store.watch_remote(ctx.job_id, int(poll)), ctx._tolerance)
        ctx.check_cancelled()
        raise _Suspend(Change.waiting(f"Waiting for remote task {ref.get('taskId')} at {ref['url']}."), BACKSTOP_MS)
    done = dict(ctx.step(name + DONE, status.outcome))
    if "final" not in ref:
        through_outage(lambda: ctx._store.forget_remote(ctx.job_id, name), ctx._tolerance)
    return done


def _relay_input(ctx: _Ctx, remotes: Remotes, name: str, ref: dict[str, Any], status: Status,
                 routing: Routing) -> Status | None:
    """The remote asks for input: ask it in this job as `ctx.ask_all` does (keys `<step>/<remote key>`, to the
    owner and `routing.to`, until `routing.deadline`), then send the answers back once, recorded as a step.
    Returns the remote's status after sending (None: look again later)."""
    wanted = sorted(status.input_requests)
    sent = f"{name}/sent/{','.join(wanted)}"
    if not wanted or through_outage(lambda: ctx._store.recorded_step(ctx.job_id, sent), ctx._tolerance) is not None:
        return None  # nothing said yet, or answered already: the remote has not moved on yet
    local = {f"{name}/{key}": key for key in wanted}
    questions = {lk: _form(status.input_requests[rk]) for lk, rk in local.items()}
    # Parks the job until all are answered (or raises `QuestionTimedOut`, as `ctx.ask` does).
    ctx.ask_all(questions, to=routing.to, deadline=routing.deadline, on_timeout=routing.on_timeout)
    recorded = through_outage(lambda: ctx._store.answers(ctx.job_id, list(local)), ctx._tolerance)
    responses = {rk: _response(json.loads(recorded[lk]), routing.on_timeout) for lk, rk in local.items()}

    def send() -> bool:
        remotes.answer(ref, responses, ctx.idempotency_key(sent))
        return True

    ctx.step(sent, send)
    try:
        return remotes.get(ref)
    except RemoteError:
        return None


def _response(answer: dict[str, Any], on_timeout: Any) -> dict[str, Any]:
    """What the remote is sent for one recorded answer: as given, or `on_timeout` once the deadline passed."""
    if answer.get("action") == TIMEOUT_ACTION:
        return {"action": "accept", "content": on_timeout}
    return answer


def _form(request: Any) -> tuple[str, dict[str, Any]]:
    """The remote's question as (message, form schema) for `ctx.ask_all` (the schema is the remote's)."""
    params = request.get("params") if isinstance(request, dict) else None
    params = params if isinstance(params, dict) else {}
    schema = params.get("requestedSchema")
    return (str(params.get("message") or "The remote task asks for input."),
            schema if isinstance(schema, dict) else {"type": "object", "properties": {}})
