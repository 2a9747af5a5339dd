"""The Python client against the app served over real HTTP, with a real worker running the jobs."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tasks_backend.client import AsyncClient, Client, Job, JobFailed, ServerUnreachable
from tasks_backend.client.protocol import _poll_delay, _Waiting
from tasks_backend.errors import (
    IdempotencyConflict,
    InvalidParams,
    JobNotCancelable,
    JobNotFound,
    NotWaitingForInput,
    ServiceUnavailable,
    Unauthenticated,
    UnknownOperation,
)
from tasks_backend.serving.logs import JsonFormatter


@pytest.fixture
def user(users: Any) -> tuple[str, str]:
    return users.new("client")  # type: ignore[no-any-return]


@pytest.fixture(autouse=True)
def no_token_in_logs(caplog: pytest.LogCaptureFixture, user: tuple[str, str]) -> Iterator[None]:
    caplog.set_level(logging.DEBUG)
    yield
    formatter = JsonFormatter()
    lines = [formatter.format(r) for r in caplog.records]
    for secret in (user[1], "alice-token", "bob-token"):
        assert not [line for line in lines if secret in line]


class DropFirstResponse(httpx.BaseTransport):
    """Delivers the first matching request to the server, then loses the response on the way back."""

    def __init__(self, method: str, path: str) -> None:
        self.inner = httpx.HTTPTransport()
        self.method, self.path = method, path
        self.sent: list[httpx.Request] = []
        self.dropped = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method == self.method and request.url.path == self.path:
            self.sent.append(request)
            if self.dropped == 0:
                self.dropped += 1
                response.read()
                response.close()
                raise httpx.ReadTimeout("response lost", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


class AsyncDropFirstResponse(httpx.AsyncBaseTransport):
    def __init__(self, method: str, path: str) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.method, self.path = method, path
        self.sent: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method == self.method and request.url.path == self.path:
            self.sent.append(request)
            if len(self.sent) == 1:
                await response.aread()
                await response.aclose()
                raise httpx.RemoteProtocolError("connection dropped", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_submit_wait_result(worker: Any, live_url: str, user: tuple[str, str]) -> None:
    with Client(live_url, user[1]) as tasks:
        job = tasks.submit("demo.export", {"rows": 3})
        assert job.status == "working" and job.poll_interval_ms == 1000
        done = tasks.wait(job.id, timeout=60)
        assert done.status == "completed" and done.operation == "demo.export"
        assert tasks.result(done)["rows"] == 3
        assert tasks.run("test.noop", timeout=60) == {"ok": True}
        assert [j.id for j in tasks.list(status="completed").jobs][-1] == job.id


def test_a_retried_submit_makes_one_job(worker: Any, live_url: str, user: tuple[str, str]) -> None:
    transport = DropFirstResponse("POST", "/v1/jobs")
    with Client(live_url, user[1], transport=transport) as tasks:
        job = tasks.submit("test.noop")
        assert len(transport.sent) == 2
        keys = {r.headers["Idempotency-Key"] for r in transport.sent}
        assert len(keys) == 1
        jobs = tasks.list().jobs
        assert [j.id for j in jobs] == [job.id]
        assert tasks.result(job.id, timeout=60) == {"ok": True}


def test_an_explicit_key_is_honoured(live_url: str, user: tuple[str, str]) -> None:
    with Client(live_url, user[1]) as tasks:
        first = tasks.submit("demo.sleep", {"seconds": 0.01}, idempotency_key="nightly-1")
        again = tasks.submit("demo.sleep", {"seconds": 0.01}, idempotency_key="nightly-1")
        assert again.id == first.id
        with pytest.raises(IdempotencyConflict):
            tasks.submit("demo.sleep", {"seconds": 5}, idempotency_key="nightly-1")


def test_errors_are_typed_from_the_shared_table(worker: Any, live_url: str, user: tuple[str, str],
                                                users: Any) -> None:
    other = users.new("other")
    with Client(live_url, user[1]) as tasks, Client(live_url, other[1]) as theirs:
        with pytest.raises(JobNotFound):
            tasks.get("00000000-0000-4000-8000-000000000000")
        mine = tasks.submit("test.noop")
        with pytest.raises(JobNotFound) as missing:
            theirs.get(mine.id)
        assert missing.value.status_code == 404  # type: ignore[attr-defined]
        with pytest.raises(UnknownOperation):
            tasks.submit("no.such.operation")
        with pytest.raises(InvalidParams) as invalid:
            tasks.submit("demo.export", {"rows": "many"})
        assert "rows" in str(invalid.value.extra)
        tasks.wait(mine.id, timeout=60)
        with pytest.raises(JobNotCancelable):
            tasks.cancel(mine.id)
        with pytest.raises(NotWaitingForInput):
            tasks.answer(mine.id, {"x": 1})
    with Client(live_url, "not-a-token") as stranger, pytest.raises(Unauthenticated):
        stranger.list()


def test_a_failed_job_raises_job_failed(worker: Any, live_url: str, user: tuple[str, str]) -> None:
    with Client(live_url, user[1]) as tasks:
        job = tasks.submit("demo.fail", {"message": "disk full"})
        with pytest.raises(JobFailed) as failed:
            tasks.result(job, timeout=60)
        assert failed.value.job.status == "failed"
        assert "disk full" in str(failed.value)


def test_events_follow_a_job_to_the_end(worker: Any, live_url: str, user: tuple[str, str]) -> None:
    with Client(live_url, user[1]) as tasks:
        job = tasks.submit("demo.sleep", {"seconds": 0.3, "steps": 3})
        seen = list(tasks.events(job.id))
        assert seen[-1].status == "completed" and seen[-1].result == {"slept": 0.3}


def test_unreachable_server_is_a_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Client(f"http://127.0.0.1:{port}", "t", retries=1) as tasks, pytest.raises(ServerUnreachable) as err:
        tasks.get("00000000-0000-4000-8000-000000000000")
    assert f"127.0.0.1:{port}" in str(err.value)


def test_the_module_path_keeps_every_public_name() -> None:
    # `tasks_backend.client` became a package; what callers import from it by name stays where it was.
    import tasks_backend.client as client

    names = {"AsyncClient", "Client", "Job", "JobCancelled", "JobFailed", "Page", "ServerUnreachable",
             "DEFAULT_URL", "TERMINAL", "SETTLED", "COMPLETED", "FAILED", "CANCELLED", "INPUT_REQUIRED",
             "error_from_response"}
    assert sorted(n for n in names if not hasattr(client, n)) == []
    assert sorted(client.__all__) == ["AsyncClient", "Client", "Job", "JobCancelled", "JobFailed", "Page",
                                      "ServerUnreachable"]


def test_no_token_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TASKS_BACKEND_TOKEN", raising=False)
    with pytest.raises(ValueError, match="TASKS_BACKEND_TOKEN"):
        Client("http://127.0.0.1:1")


def test_polling_follows_the_job_hint_then_retry_after() -> None:
    job = Job.from_wire({"taskId": "x", "status": "working", "pollIntervalMs": 250})
    request = httpx.Request("GET", "http://x/")
    assert _poll_delay(job, httpx.Response(200, headers={"Retry-After": "1"}, request=request)) == 0.25
    bare = Job.from_wire({"taskId": "x", "status": "working"})
    assert _poll_delay(bare, httpx.Response(200, headers={"Retry-After": "3"}, request=request)) == 3


def test_waiting_stops_at_a_settled_handle_or_at_the_deadline() -> None:
    now = [100.0]
    waiting = _Waiting(5.0, lambda: now[0])
    response = httpx.Response(200, request=httpx.Request("GET", "http://x/"))
    working = Job.from_wire({"taskId": "x", "status": "working", "pollIntervalMs": 2000})
    assert waiting.next_poll(working, response) == 2.0
    now[0] = 104.0
    assert waiting.next_poll(working, response) == 1.0  # never past the deadline
    now[0] = 105.0
    assert waiting.next_poll(working, response) is None
    for status in ("completed", "failed", "cancelled", "input_required"):
        settled = Job.from_wire({"taskId": "x", "status": status})
        assert _Waiting(None, lambda: now[0]).next_poll(settled, response) is None


def test_which_sends_are_repeated() -> None:
    request = httpx.Request("GET", "http://127.0.0.1:1/v1/jobs")
    busy = httpx.Response(503, request=request)
    with Client("http://127.0.0.1:1", "t", retries=2) as tasks:
        assert isinstance(tasks._after_send(0, True, busy), float)
        with pytest.raises(ServiceUnavailable):
            tasks._after_send(2, True, busy)  # the last attempt answers with the error
        with pytest.raises(ServiceUnavailable):
            tasks._after_send(0, False, busy)  # not repeatable: answered at once
        # A request that never connected cannot have taken effect: resent even when not repeatable.
        assert isinstance(tasks._after_send(0, False, httpx.ConnectError("refused", request=request)), float)
        with pytest.raises(ServerUnreachable):
            tasks._after_send(0, False, httpx.ReadTimeout("lost", request=request))
        ok = httpx.Response(200, request=request)
        assert tasks._after_send(0, True, ok) is ok


def test_async_client_end_to_end(worker: Any, live_url: str, user: tuple[str, str]) -> None:
    async def scenario() -> None:
        transport = AsyncDropFirstResponse("POST", "/v1/jobs")
        async with AsyncClient(live_url, user[1], transport=transport) as tasks:
            job = await tasks.submit("demo.refund", {"order_id": "A-1", "amount": 12.5})
            assert len(transport.sent) == 2
            assert [j.id for j in (await tasks.list()).jobs] == [job.id]
            parked = await tasks.wait(job.id, timeout=60)
            assert parked.status == "input_required" and "approval" in (parked.input_requests or {})
            await tasks.answer(job.id, {"approval": {"approved": True}})
            result = await tasks.result(job.id, timeout=60)
            assert result["status"] == "approved" and result["orderId"] == "A-1"
            follow = await tasks.submit("demo.sleep", {"seconds": 0.2, "steps": 2})
            statuses = [j.status async for j in tasks.events(follow.id)]
            assert statuses[-1] == "completed"
            with pytest.raises(JobNotFound):
                await tasks.cancel("00000000-0000-4000-8000-000000000000")

    asyncio.run(scenario())
