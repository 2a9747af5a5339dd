"""`AsyncClient`: the HTTP API for asyncio code, the same calls as `Client`, awaited."""

from __future__ import annotations

import asyncio
import builtins
import json
import uuid
from collections.abc import AsyncIterator, Mapping
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
