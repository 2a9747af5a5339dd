"""`Client`: the HTTP API, synchronously."""

from __future__ import annotations

import builtins
import json
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import httpx

from .protocol import (
    _STREAM_TIMEOUT,
    SETTLED,
    Job,
    Page,
    _backoff,
    _Base,
    _check,
    _events_headers,
    _list_params,
    _poll_delay,
    _result_of,
    _SseParser,
    _submit_body,
    error_from_response,
)


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
