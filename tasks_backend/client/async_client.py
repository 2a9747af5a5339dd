"""`AsyncClient`: the HTTP API for asyncio code, the same calls as `Client`, awaited."""

from __future__ import annotations

import asyncio
import builtins
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from .protocol import Job, Page, _Base, _Outcome, _result_of, _SseParser, _Waiting, error_from_response


class AsyncClient(_Base[httpx.AsyncClient]):
    """The HTTP API for asyncio code; the same calls as `Client`, awaited."""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0,
                 retries: int = 3, transport: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__(httpx.AsyncClient, url, token, timeout=timeout, retries=retries, transport=transport)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, *, retry: bool = True, **kwargs: Any) -> httpx.Response:
        for attempt in range(self.retries + 1):
            try:
                outcome: _Outcome = await self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                outcome = exc
            answer = self._after_send(attempt, retry, outcome)
            if isinstance(answer, httpx.Response):
                return answer
            await asyncio.sleep(answer)
        raise AssertionError("unreachable")

    async def submit(self, operation: str, params: Mapping[str, Any] | None = None, *,
                     idempotency_key: str | None = None, run_at: dt.datetime | str | None = None,
                     delay: float | dt.timedelta | None = None, priority: int | None = None,
                     webhook: Mapping[str, Any] | None = None) -> Job:
        """Start a job (see the sync client's `submit`)."""
        response = await self._request("POST", "/v1/jobs", **self._submit_request(
            operation, params, idempotency_key, run_at, delay, priority, webhook))
        return Job.from_wire(response.json())

    async def get(self, job_id: str) -> Job:
        return Job.from_wire((await self._request("GET", f"/v1/jobs/{job_id}")).json())

    async def wait(self, job_id: str, timeout: float | None = None) -> Job:
        waiting = _Waiting(timeout, asyncio.get_running_loop().time)
        while True:
            response = await self._request("GET", f"/v1/jobs/{job_id}")
            job = Job.from_wire(response.json())
            delay = waiting.next_poll(job, response)
            if delay is None:
                return job
            await asyncio.sleep(delay)

    async def result(self, job: Job | str, timeout: float | None = None) -> Any:
        return _result_of(await self.wait(job.id if isinstance(job, Job) else job, timeout))

    async def run(self, operation: str, params: Mapping[str, Any] | None = None, *,
                  timeout: float | None = None, idempotency_key: str | None = None) -> Any:
        job = await self.submit(operation, params, idempotency_key=idempotency_key)
        return await self.result(job, timeout)

    async def cancel(self, job_id: str) -> Job:
        return Job.from_wire((await self._request("POST", f"/v1/jobs/{job_id}/cancel", retry=False)).json())

    async def rerun(self, job_id: str, keep_steps: bool = False, *, idempotency_key: str | None = None) -> Job:
        """As `Client.rerun`."""
        headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
        response = await self._request("POST", f"/v1/jobs/{job_id}/rerun", json={"keepSteps": keep_steps},
                                       headers=headers)
        return Job.from_wire(response.json())

    async def bulk(self, action: str, filter: Mapping[str, Any] | None = None, *, dry_run: bool = False,
                   keep_steps: bool = False) -> Job:
        """As `Client.bulk`."""
        body = {"action": action, "filter": dict(filter or {}), "dryRun": dry_run, "keepSteps": keep_steps}
        response = await self._request("POST", "/v1/jobs/bulk", json=body,
                                       headers={"Idempotency-Key": str(uuid.uuid4())})
        return Job.from_wire(response.json())

    async def answer(self, job_id: str, responses: Mapping[str, Any]) -> Job:
        response = await self._request("POST", f"/v1/jobs/{job_id}/input", retry=False,
                                       json={"inputResponses": dict(responses)})
        return Job.from_wire(response.json())

    async def list(self, status: str | None = None, limit: int = 50, cursor: str | None = None) -> Page:
        params = self._list_params(status, limit, cursor)
        body = (await self._request("GET", "/v1/jobs", params=params)).json()
        return Page.from_wire(body)

    async def operations(self) -> builtins.list[dict[str, Any]]:
        return list((await self._request("GET", "/v1/operations")).json()["operations"])

    async def events(self, job_id: str) -> AsyncIterator[Job]:
        parser = _SseParser()
        with self._reaching():
            while True:
                async with self._http.stream("GET", **self._events_request(job_id, parser.last_id)) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        raise error_from_response(response)
                    async for line in response.aiter_lines():
                        job = parser.handle(line)
                        if job is not None:
                            yield job
                            if job.done:
                                return
