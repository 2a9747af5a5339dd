"""`Client`: the HTTP API, synchronously."""

from __future__ import annotations

import builtins
import datetime as dt
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

import httpx

from .protocol import Job, Page, _Base, _Outcome, _result_of, _SseParser, _Waiting, error_from_response


class Client(_Base[httpx.Client]):
    """The HTTP API, synchronously. Reuse one client: it keeps connections open."""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0,
                 retries: int = 3, transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(httpx.Client, url, token, timeout=timeout, retries=retries, transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, *, retry: bool = True, **kwargs: Any) -> httpx.Response:
        """Send, retrying transport failures and 503s when `retry` says repeating is harmless."""
        for attempt in range(self.retries + 1):
            try:
                outcome: _Outcome = self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                outcome = exc
            answer = self._after_send(attempt, retry, outcome)
            if isinstance(answer, httpx.Response):
                return answer
            time.sleep(answer)
        raise AssertionError("unreachable")

    # -- calls ---------------------------------------------------------------------
    def submit(self, operation: str, params: Mapping[str, Any] | None = None, *,
               idempotency_key: str | None = None, run_at: dt.datetime | str | None = None,
               delay: float | dt.timedelta | None = None, priority: int | None = None,
               webhook: Mapping[str, Any] | None = None) -> Job:
        """Start a job; retried with the same idempotency key, so it is created at most once. `run_at` (an aware
        datetime or RFC 3339 text) or `delay` (seconds, or a timedelta): not before then; `priority` 0-9 (default
        5): among the caller's queued jobs, higher runs first; `webhook`: `{"url": ..., "events": [...]}`, sent
        the job's changes (see the README's "Webhooks")."""
        response = self._request("POST", "/v1/jobs", **self._submit_request(
            operation, params, idempotency_key, run_at, delay, priority, webhook))
        return Job.from_wire(response.json())

    def get(self, job_id: str) -> Job:
        return Job.from_wire(self._request("GET", f"/v1/jobs/{job_id}").json())

    def wait(self, job_id: str, timeout: float | None = None) -> Job:
        """Poll until the job is done or waiting for input (or `timeout` seconds pass): the last handle."""
        waiting = _Waiting(timeout, time.monotonic)
        while True:
            response = self._request("GET", f"/v1/jobs/{job_id}")
            job = Job.from_wire(response.json())
            delay = waiting.next_poll(job, response)
            if delay is None:
                return job
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

    def rerun(self, job_id: str, keep_steps: bool = False, *, idempotency_key: str | None = None) -> Job:
        """Rerun a failed or cancelled job as a new one (its `rerun_of` names this one); with `keep_steps` the steps
        the original recorded count as done. Retried with the same idempotency key, so it is made at most once."""
        headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
        response = self._request("POST", f"/v1/jobs/{job_id}/rerun", json={"keepSteps": keep_steps}, headers=headers)
        return Job.from_wire(response.json())

    def bulk(self, action: str, filter: Mapping[str, Any] | None = None, *, dry_run: bool = False,
             keep_steps: bool = False) -> Job:
        """Start a bulk `cancel` or `rerun` of the jobs `filter` matches: the bulk job's handle (its result gives
        the counts and ids once it completed; `dry_run`: what it would do, nothing done)."""
        body = {"action": action, "filter": dict(filter or {}), "dryRun": dry_run, "keepSteps": keep_steps}
        response = self._request("POST", "/v1/jobs/bulk", json=body,
                                 headers={"Idempotency-Key": str(uuid.uuid4())})
        return Job.from_wire(response.json())

    def answer(self, job_id: str, responses: Mapping[str, Any]) -> Job:
        """Answer open input requests, `{request key: content}`; the job resumes once all are answered."""
        response = self._request("POST", f"/v1/jobs/{job_id}/input", retry=False,
                                 json={"inputResponses": dict(responses)})
        return Job.from_wire(response.json())

    def list(self, status: str | None = None, limit: int = 50, cursor: str | None = None) -> Page:
        params = self._list_params(status, limit, cursor)
        body = self._request("GET", "/v1/jobs", params=params).json()
        return Page.from_wire(body)

    def operations(self) -> builtins.list[dict[str, Any]]:
        return list(self._request("GET", "/v1/operations").json()["operations"])

    def audit(self, *, job: str | None = None, principal: str | None = None, since: str | None = None,
              cursor: str | None = None, limit: int = 50) -> dict[str, Any]:
        """A page of the audit trail (`GET /v1/audit`) as the API gives it: `entries`, newest first, and
        `nextCursor`. `since`: RFC 3339, or a duration back from now (`1h`)."""
        query = {"job": job, "principal": principal, "since": since, "cursor": cursor, "limit": limit}
        return dict(self._request("GET", "/v1/audit", params={k: v for k, v in query.items() if v is not None}).json())

    # -- schedules (plain JSON: the schedule as the API gives it) -------------------------------------
    def add_schedule(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Define a schedule (`POST /v1/schedules`); the same definition again returns it as it stands."""
        return dict(self._request("POST", "/v1/schedules", json=dict(body)).json())

    def schedules(self, page_size: int = 200) -> builtins.list[dict[str, Any]]:
        """Every schedule of the caller, oldest first, following `GET /v1/schedules`'s pages."""
        out: builtins.list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": page_size, **({"cursor": cursor} if cursor else {})}
            page = self._request("GET", "/v1/schedules", params=params).json()
            out.extend(page["schedules"])
            cursor = page.get("nextCursor")
            if not cursor:
                return out

    def schedule(self, name: str) -> dict[str, Any]:
        return dict(self._request("GET", f"/v1/schedules/{quote(name, safe='')}").json())

    def delete_schedule(self, name: str) -> None:
        self._request("DELETE", f"/v1/schedules/{quote(name, safe='')}")

    def pause_schedule(self, name: str) -> dict[str, Any]:
        return dict(self._request("POST", f"/v1/schedules/{quote(name, safe='')}/pause").json())

    def resume_schedule(self, name: str) -> dict[str, Any]:
        return dict(self._request("POST", f"/v1/schedules/{quote(name, safe='')}/resume").json())

    # -- webhook signing secret (`{"secret": "whsec_...", "previousValidUntil"?: ...}`) -------------------
    def webhook_secret(self) -> dict[str, Any]:
        """The caller's webhook signing secret (made on first use)."""
        return dict(self._request("GET", "/v1/webhook-secret").json())

    def rotate_webhook_secret(self, grace_seconds: int | None = None) -> dict[str, Any]:
        """A new signing secret; the replaced one also signs for `grace_seconds` (server default: a day).
        Not retried: a second rotation would drop the secret the first one made."""
        body = {} if grace_seconds is None else {"graceSeconds": grace_seconds}
        return dict(self._request("POST", "/v1/webhook-secret", json=body, retry=False).json())

    def events(self, job_id: str) -> Iterator[Job]:
        """Each change of the job as the server streams it, until it is done; reconnects as needed."""
        parser = _SseParser()
        with self._reaching():
            while True:
                with self._http.stream("GET", **self._events_request(job_id, parser.last_id)) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise error_from_response(response)
                    for line in response.iter_lines():
                        job = parser.handle(line)
                        if job is not None:
                            yield job
                            if job.done:
                                return
