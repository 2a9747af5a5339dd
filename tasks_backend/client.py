"""A small client for the HTTP API, for callers in other processes: `Client` (sync) and `AsyncClient`.

    with Client("http://127.0.0.1:8000", token) as tasks:
        job = tasks.submit("demo.export", {"rows": 1000})
        result = tasks.result(tasks.wait(job.id))

Errors are rebuilt from the problem `type` through the server's own table (`tasks_backend.errors`), so
`except JobNotFound:` means the same in process and over HTTP. Every submit carries an idempotency key, reused
when retried, so a lost response never makes a second job; waiting polls at the job's `pollIntervalMs`.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from .errors import (
    PROBLEM_TYPE_BASE,
    Conflict,
    ServiceUnavailable,
    TasksBackendError,
    error_for_slug,
)
from .model.domain import TERMINAL_STATES, JobState
from .model.states import WIRE_STATUS

__all__ = [
    "AsyncClient",
    "Client",
    "Job",
    "JobCancelled",
    "JobFailed",
    "Page",
    "ServerUnreachable",
]

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
                   input_requests=data.get("inputRequests"), raw=dict(data))


@dataclass(frozen=True)
class Page:
    jobs: list[Job]
    next_cursor: str | None


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


def _result_of(job: Job) -> Any:
    if job.status == COMPLETED:
        return job.result
    if job.status == FAILED:
        raise JobFailed(job)
    if job.status == CANCELLED:
        raise JobCancelled(job)
    raise Conflict(f"The job is {job.status}; it has no result yet.")


def _submit_body(operation: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    return {"operation": operation, "params": dict(params or {})}


class _SseParser:
    """Turns the lines of a server-sent event stream into (id, event, data) triples."""

    def __init__(self) -> None:
        self.last_id: str | None = None
        self._event, self._data = "message", list[str]()

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


def _list_params(status: str | None, limit: int, cursor: str | None) -> dict[str, str | int]:
    return {k: v for k, v in {"status": status, "limit": limit, "cursor": cursor}.items() if v is not None}


def _events_headers(last_id: str | None) -> dict[str, str]:
    return {"Accept": "text/event-stream", **({"Last-Event-ID": last_id} if last_id else {})}


#: The stream may stay quiet for as long as the job does; only connecting is bounded.
_STREAM_TIMEOUT = httpx.Timeout(10.0, read=None)


class _Base:
    def __init__(self, url: str | None, token: str | None, retries: int) -> None:
        self.url, token = _settings(url, token)
        self.retries = retries
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json",
                         "User-Agent": "tasks-backend-client"}

    def _unreachable(self, exc: Exception) -> ServerUnreachable:
        return ServerUnreachable(f"Cannot reach {self.url}: {type(exc).__name__} {exc}".strip())


class Client(_Base):
    """The HTTP API, synchronously. Reuse one client: it keeps connections open."""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0,
                 retries: int = 3, transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(url, token, retries)
        self._http = httpx.Client(base_url=self.url, headers=self._headers, timeout=timeout,
                                  transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, *, retry: bool = True, **kwargs: Any) -> httpx.Response:
        """Send, retrying transport failures and 503s when `retry` says repeating is harmless."""
        for attempt in range(self.retries + 1):
            last = attempt == self.retries or not retry
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                # A request that never connected cannot have taken effect, so it is always safe to resend.
                if last and not (isinstance(exc, httpx.ConnectError) and attempt < self.retries):
                    raise self._unreachable(exc) from exc
                time.sleep(_backoff(attempt, None))
                continue
            if response.status_code == 503 and not last:
                time.sleep(_backoff(attempt, response))
                continue
            return _check(response)
        raise AssertionError("unreachable")

    # -- calls ---------------------------------------------------------------------
    def submit(self, operation: str, params: Mapping[str, Any] | None = None, *,
               idempotency_key: str | None = None) -> Job:
        """Start a job; retried with the same idempotency key, so it is created at most once."""
        key = idempotency_key or str(uuid.uuid4())
        response = self._request("POST", "/v1/jobs", json=_submit_body(operation, params),
                                 headers={"Idempotency-Key": key})
        return Job.from_wire(response.json())

    def get(self, job_id: str) -> Job:
        return Job.from_wire(self._request("GET", f"/v1/jobs/{job_id}").json())

    def wait(self, job_id: str, timeout: float | None = None) -> Job:
        """Poll until the job is done or waiting for input (or `timeout` seconds pass): the last handle."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            response = self._request("GET", f"/v1/jobs/{job_id}")
            job = Job.from_wire(response.json())
            if job.status in SETTLED:
                return job
            delay = _poll_delay(job, response)
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return job
                delay = min(delay, left)
            time.sleep(delay)

    def result(self, job: Job | str, timeout: float | None = None) -> Any:
        """The job's result, waiting for it; raises `JobFailed`/`JobCancelled` if it has none."""
        return _result_of(self.wait(job.id if isinstance(job, Job) else job, timeout))

    def run(self, operation: str, params: Mapping[str, Any] | None = None, *, timeout: float | None = None,
            idempotency_key: str | None = None) -> Any:
        """Submit and wait for the result in one call."""
        return self.result(self.submit(operation, params, idempotency_key=idempotency_key), timeout)

    def cancel(self, job_id: str) -> Job:
        return Job.from_wire(self._request("POST", f"/v1/jobs/{job_id}/cancel", retry=False).json())

    def answer(self, job_id: str, responses: Mapping[str, Any]) -> Job:
        """Answer open input requests, `{request key: content}`; the job resumes once all are answered."""
        response = self._request("POST", f"/v1/jobs/{job_id}/input", retry=False,
                                 json={"inputResponses": dict(responses)})
        return Job.from_wire(response.json())

    def list(self, status: str | None = None, limit: int = 50, cursor: str | None = None) -> Page:
        params = _list_params(status, limit, cursor)
        body = self._request("GET", "/v1/jobs", params=params).json()
        return Page([Job.from_wire(j) for j in body["jobs"]], body.get("nextCursor"))

    def operations(self) -> builtins.list[dict[str, Any]]:
        return list(self._request("GET", "/v1/operations").json()["operations"])

    def events(self, job_id: str) -> Iterator[Job]:
        """Each change of the job as the server streams it, until it is done; reconnects as needed."""
        parser = _SseParser()
        while True:
            try:
                with self._http.stream("GET", f"/v1/jobs/{job_id}/events",
                                       headers=_events_headers(parser.last_id),
                                       timeout=_STREAM_TIMEOUT) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise error_from_response(response)
                    for line in response.iter_lines():
                        event = parser.feed(line)
                        if event and event[0] == "handle":
                            job = Job.from_wire(json.loads(event[1]))
                            yield job
                            if job.done:
                                return
            except httpx.TransportError as exc:
                raise self._unreachable(exc) from exc


class AsyncClient(_Base):
    """The HTTP API for asyncio code; the same calls as `Client`, awaited."""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0,
                 retries: int = 3, transport: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__(url, token, retries)
        self._http = httpx.AsyncClient(base_url=self.url, headers=self._headers, timeout=timeout,
                                       transport=transport)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, *, retry: bool = True, **kwargs: Any) -> httpx.Response:
        for attempt in range(self.retries + 1):
            last = attempt == self.retries or not retry
            try:
                response = await self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                if last and not (isinstance(exc, httpx.ConnectError) and attempt < self.retries):
                    raise self._unreachable(exc) from exc
                await asyncio.sleep(_backoff(attempt, None))
                continue
            if response.status_code == 503 and not last:
                await asyncio.sleep(_backoff(attempt, response))
                continue
            return _check(response)
        raise AssertionError("unreachable")

    async def submit(self, operation: str, params: Mapping[str, Any] | None = None, *,
                     idempotency_key: str | None = None) -> Job:
        key = idempotency_key or str(uuid.uuid4())
        response = await self._request("POST", "/v1/jobs", json=_submit_body(operation, params),
                                       headers={"Idempotency-Key": key})
        return Job.from_wire(response.json())

    async def get(self, job_id: str) -> Job:
        return Job.from_wire((await self._request("GET", f"/v1/jobs/{job_id}")).json())

    async def wait(self, job_id: str, timeout: float | None = None) -> Job:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            response = await self._request("GET", f"/v1/jobs/{job_id}")
            job = Job.from_wire(response.json())
            if job.status in SETTLED:
                return job
            delay = _poll_delay(job, response)
            if deadline is not None:
                left = deadline - loop.time()
                if left <= 0:
                    return job
                delay = min(delay, left)
            await asyncio.sleep(delay)

    async def result(self, job: Job | str, timeout: float | None = None) -> Any:
        return _result_of(await self.wait(job.id if isinstance(job, Job) else job, timeout))

    async def run(self, operation: str, params: Mapping[str, Any] | None = None, *,
                  timeout: float | None = None, idempotency_key: str | None = None) -> Any:
        job = await self.submit(operation, params, idempotency_key=idempotency_key)
        return await self.result(job, timeout)

    async def cancel(self, job_id: str) -> Job:
        return Job.from_wire((await self._request("POST", f"/v1/jobs/{job_id}/cancel", retry=False)).json())

    async def answer(self, job_id: str, responses: Mapping[str, Any]) -> Job:
        response = await self._request("POST", f"/v1/jobs/{job_id}/input", retry=False,
                                       json={"inputResponses": dict(responses)})
        return Job.from_wire(response.json())

    async def list(self, status: str | None = None, limit: int = 50, cursor: str | None = None) -> Page:
        params = _list_params(status, limit, cursor)
        body = (await self._request("GET", "/v1/jobs", params=params)).json()
        return Page([Job.from_wire(j) for j in body["jobs"]], body.get("nextCursor"))

    async def operations(self) -> builtins.list[dict[str, Any]]:
        return list((await self._request("GET", "/v1/operations")).json()["operations"])

    async def events(self, job_id: str) -> AsyncIterator[Job]:
        parser = _SseParser()
        while True:
            try:
                async with self._http.stream("GET", f"/v1/jobs/{job_id}/events",
                                             headers=_events_headers(parser.last_id),
                                             timeout=_STREAM_TIMEOUT) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        raise error_from_response(response)
                    async for line in response.aiter_lines():
                        event = parser.feed(line)
                        if event and event[0] == "handle":
                            job = Job.from_wire(json.loads(event[1]))
                            yield job
                            if job.done:
                                return
            except httpx.TransportError as exc:
                raise self._unreachable(exc) from exc
