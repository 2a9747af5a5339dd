"""The HTTP API's protocol without I/O, shared by both clients: job handles, the typed errors rebuilt from
problem `type`s, retry backoff and poll delays, and the server-sent event parser.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx

from ..errors import (
    PROBLEM_TYPE_BASE,
    Conflict,
    ServiceUnavailable,
    TasksBackendError,
    error_for_slug,
)
from ..model.domain import TERMINAL_STATES, JobState
from ..model.states import WIRE_STATUS

#: Wire statuses of finished jobs, from the state table.
TERMINAL = frozenset(WIRE_STATUS[s] for s in TERMINAL_STATES)
COMPLETED, FAILED, CANCELLED, INPUT_REQUIRED = (
    WIRE_STATUS[s] for s in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.INPUT_REQUIRED))
#: Statuses at which `wait` stops: the job is done or needs a person.
SETTLED = TERMINAL | {INPUT_REQUIRED}
DEFAULT_URL = "http://127.0.0.1:8000"


class ServerUnreachable(ServiceUnavailable):
    """The server could not be reached (refused, timed out, or the connection broke)."""

    message = "The server could not be reached."


class JobFailed(TasksBackendError):
    """The job ended `failed`; `job.error` holds what the job reported."""

    message = "The job failed."

    def __init__(self, job: Job) -> None:
        super().__init__(str((job.error or {}).get("message") or self.message))
        self.job = job


class JobCancelled(TasksBackendError):
    """The job ended `cancelled`, so it has no result."""

    message = "The job was cancelled."

    def __init__(self, job: Job) -> None:
        super().__init__(job.status_message or self.message)
        self.job = job


@dataclass(frozen=True)
class Job:
    """A task handle as the server last reported it."""

    id: str
    status: str
    created_at: str
    last_updated_at: str
    ttl_ms: int
    poll_interval_ms: int
    status_message: str | None = None
    operation: str | None = None
    progress: dict[str, float | None] | None = None
    result: Any = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None
    #: Its priority among its owner's queued jobs (0-9), and when it may start (RFC 3339), if it was given a time.
    priority: int | None = None
    run_at: str | None = None
    #: The failed or cancelled job this one reruns (`rerun`).
    rerun_of: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Job:
        return cls(id=data["taskId"], status=data["status"], created_at=data.get("createdAt", ""),
                   last_updated_at=data.get("lastUpdatedAt", ""), ttl_ms=int(data.get("ttlMs") or 0),
                   poll_interval_ms=int(data.get("pollIntervalMs") or 0),
                   status_message=data.get("statusMessage"), operation=data.get("operation"),
                   progress=data.get("progress"), result=data.get("result"), error=data.get("error"),
                   input_requests=data.get("inputRequests"), priority=data.get("priority"),
                   run_at=data.get("runAt"), rerun_of=data.get("rerunOf"), raw=dict(data))


@dataclass(frozen=True)
class Page:
    jobs: list[Job]
    next_cursor: str | None

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Page:
        return cls([Job.from_wire(j) for j in data["jobs"]], data.get("nextCursor"))


# -- the protocol, without I/O: shared by both clients --------------------------------------------
def _settings(url: str | None, token: str | None) -> tuple[str, str]:
    url = (url or os.environ.get("TASKS_BACKEND_URL") or DEFAULT_URL).rstrip("/")
    token = token or os.environ.get("TASKS_BACKEND_TOKEN") or ""
    if not token:
        raise ValueError("A bearer token is required: pass token= or set TASKS_BACKEND_TOKEN.")
    return url, token


def error_from_response(response: httpx.Response) -> TasksBackendError:
    """The typed error for a failed response: the problem `type` names the class in the shared table."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("type"), str):
        slug = body["type"].removeprefix(PROBLEM_TYPE_BASE)
        extra = {k: v for k, v in body.items() if k not in ("type", "title", "status", "detail")}
        exc = error_for_slug(slug)(body.get("detail") or body.get("title"), extra=extra)
    else:
        exc = (ServiceUnavailable if response.status_code == 503 else TasksBackendError)(
            f"HTTP {response.status_code} from {response.request.url}")
    exc.status_code = response.status_code  # type: ignore[attr-defined]
    return exc


def _check(response: httpx.Response) -> httpx.Response:
    if response.status_code >= 400:
        raise error_from_response(response)
    return response


def _retry_after(response: httpx.Response | None) -> float | None:
    value = response.headers.get("Retry-After") if response is not None else None
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _poll_delay(job: Job, response: httpx.Response | None) -> float:
    """The job's own poll hint first; the server's Retry-After when the handle carries none."""
    if job.poll_interval_ms > 0:
        return job.poll_interval_ms / 1000
    return _retry_after(response) or 2.0


def _backoff(attempt: int, response: httpx.Response | None) -> float:
    hinted = _retry_after(response)
    if hinted is not None:
        return min(hinted, 30.0)
    return min(0.2 * float(2**attempt), 5.0) * (0.5 + random.random() / 2)


class _Waiting:
    """When `wait` polls again: at the job's poll hint, until the job settles or `timeout` seconds pass."""

    def __init__(self, timeout: float | None, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._deadline = None if timeout is None else clock() + timeout

    def next_poll(self, job: Job, response: httpx.Response) -> float | None:
        """Seconds until the next poll, or None when `job` is the answer (settled, or time is up)."""
        if job.status in SETTLED:
            return None
        delay = _poll_delay(job, response)
        if self._deadline is None:
            return delay
        left = self._deadline - self._clock()
        return min(delay, left) if left > 0 else None


def _result_of(job: Job) -> Any:
    if job.status == COMPLETED:
        return job.result
    if job.status == FAILED:
        raise JobFailed(job)
    if job.status == CANCELLED:
        raise JobCancelled(job)
    raise Conflict(f"The job is {job.status}; it has no result yet.")


class _SseParser:
    """Turns the lines of a server-sent event stream into (id, event, data) triples."""

    def __init__(self) -> None:
        self.last_id: str | None = None
        self._event, self._data = "message", list[str]()

    def handle(self, line: str) -> Job | None:
        """The job handle that `line` completes, if it completes a `handle` event."""
        event = self.feed(line)
        return Job.from_wire(json.loads(event[1])) if event and event[0] == "handle" else None

    def feed(self, line: str) -> tuple[str, str] | None:
        """The (event, data) that `line` completes, if it completes one."""
        if not line:
            done = (self._event, "\n".join(self._data)) if self._data else None
            self._event, self._data = "message", []
            return done
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "id":
            self.last_id = value or self.last_id
        elif name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None


#: The stream may stay quiet for as long as the job does; only connecting is bounded.
_STREAM_TIMEOUT = httpx.Timeout(10.0, read=None)


#: What one send of a request comes to: a response, or the transport failing.
_Outcome = httpx.Response | httpx.TransportError


_Http = TypeVar("_Http", httpx.Client, httpx.AsyncClient)


class _Base(Generic[_Http]):
    def __init__(self, http: Callable[..., _Http], url: str | None, token: str | None, *, timeout: float,
                 retries: int, transport: Any) -> None:
        self.url, token = _settings(url, token)
        self.retries = retries
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json",
                   "User-Agent": "tasks-backend-client"}
        self._http: _Http = http(base_url=self.url, headers=headers, timeout=timeout, transport=transport)

    def _unreachable(self, exc: Exception) -> ServerUnreachable:
        return ServerUnreachable(f"Cannot reach {self.url}: {type(exc).__name__} {exc}".strip())

    @contextmanager
    def _reaching(self) -> Iterator[None]:
        """Raises a transport failure inside as `ServerUnreachable`."""
        try:
            yield
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc

    @staticmethod
    def _submit_request(operation: str, params: Mapping[str, Any] | None, idempotency_key: str | None,
                        run_at: dt.datetime | str | None = None, delay: float | dt.timedelta | None = None,
                        priority: int | None = None, webhook: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """A submit's body and headers; the idempotency key travels with every retry, so the job is created once.
        `run_at` (an aware datetime or RFC 3339 text) or `delay` (seconds or a timedelta) hold the start back;
        `priority` (0-9) ranks it among the caller's queued jobs; `webhook` (`{"url": ..., "events": [...]}`)
        is POSTed the job's changes, signed with the caller's webhook secret."""
        key = idempotency_key or str(uuid.uuid4())
        body: dict[str, Any] = {"operation": operation, "params": dict(params or {})}
        if isinstance(run_at, dt.datetime):
            if run_at.tzinfo is None:
                raise ValueError("run_at must be timezone-aware")
            body["runAt"] = run_at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
        elif run_at is not None:
            body["runAt"] = run_at
        if delay is not None:
            seconds = delay.total_seconds() if isinstance(delay, dt.timedelta) else delay
            body["delayMs"] = round(seconds * 1000)
        if priority is not None:
            body["priority"] = priority
        if webhook is not None:
            body["webhook"] = dict(webhook)
        return {"json": body, "headers": {"Idempotency-Key": key}}

    @staticmethod
    def _list_params(status: str | None, limit: int, cursor: str | None) -> dict[str, str | int]:
        return {k: v for k, v in {"status": status, "limit": limit, "cursor": cursor}.items() if v is not None}

    @staticmethod
    def _events_request(job_id: str, last_id: str | None) -> dict[str, Any]:
        """The event stream's URL, headers and timeout, resuming after `last_id` when there is one."""
        headers = {"Accept": "text/event-stream", **({"Last-Event-ID": last_id} if last_id else {})}
        return {"url": f"/v1/jobs/{job_id}/events", "headers": headers, "timeout": _STREAM_TIMEOUT}

    def _after_send(self, attempt: int, retry: bool, outcome: _Outcome) -> httpx.Response | float:
        """What one send of a request comes to: the (checked) response, or seconds to wait before sending again.

        Transport failures and 503s are resent while attempts remain and `retry` says repeating is harmless;
        a final transport failure raises `ServerUnreachable`.
        """
        last = attempt >= self.retries or not retry
        if isinstance(outcome, httpx.TransportError):
            # A request that never connected cannot have taken effect, so it is always safe to resend.
            if last and not (isinstance(outcome, httpx.ConnectError) and attempt < self.retries):
                raise self._unreachable(outcome) from outcome
            return _backoff(attempt, None)
        if outcome.status_code == 503 and not last:
            return _backoff(attempt, outcome)
        return _check(outcome)
