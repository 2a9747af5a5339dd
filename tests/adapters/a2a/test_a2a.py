"""The A2A adapter driven by the real a2a-sdk 1.3.0 client over real HTTP, with a real worker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError
from google.protobuf import json_format

from tests.conftest import wait_until

T = TypeVar("T")
pytestmark = pytest.mark.usefixtures("worker")


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(scenario())  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def a2a_client(base: str, token: str, **config: Any) -> AsyncIterator[Client]:
    async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {token}"}) as hc:
        config.setdefault("streaming", False)
        client = await ClientFactory(ClientConfig(httpx_client=hc, **config)).create_from_url(base)
        try:
            yield client
        finally:
            await client.close()


def data_part(value: dict[str, Any]) -> Part:
    return json_format.ParseDict({"data": value}, Part())


def order(operation: str, params: dict[str, Any], *, task_id: str = "", context_id: str = "",
          return_immediately: bool = False) -> SendMessageRequest:
    message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), task_id=task_id,
                      context_id=context_id, parts=[data_part({"operation": operation, "params": params})])
    return SendMessageRequest(message=message,
                              configuration=SendMessageConfiguration(return_immediately=return_immediately))


def answer(task_id: str, responses: dict[str, Any]) -> SendMessageRequest:
    message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), task_id=task_id,
                      parts=[data_part({"inputResponses": responses})])
    return SendMessageRequest(message=message)


async def send(client: Client, request: SendMessageRequest) -> Task:
    tasks = [event.task async for event in client.send_message(request)]
    assert len(tasks) == 1
    return tasks[0]


def state(task: Task) -> str:
    return TaskState.Name(task.status.state)


def as_json(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message)


async def poll(client: Client, task_id: str, done: Callable[[Task], bool], timeout: float = 30) -> Task:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        task = await client.get_task(GetTaskRequest(id=task_id))
        if done(task):
            return task
        assert loop.time() < deadline, f"task {task_id} stuck in {state(task)}"
        await asyncio.sleep(0.05)


def test_agent_card_is_public_and_lists_every_operation(http: httpx.Client, runtime: Any) -> None:
    response = http.get("/.well-known/agent-card.json")
    assert response.status_code == 200
    card = response.json()
    assert card["supportedInterfaces"] == [{"url": f"{http.base_url}".rstrip("/") + "/a2a",
                                            "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]
    assert card["capabilities"]["streaming"] is True and card["capabilities"]["pushNotifications"] is True
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert {s["id"] for s in card["skills"]} == {spec.name for spec in runtime.registry}


def test_send_immediately_then_poll_to_the_result_artifact(live_url: str, users: Any) -> None:
    _, token = users.new()

    async def scenario() -> None:
        async with a2a_client(live_url, token) as client:
            sleep = order("demo.sleep", {"seconds": 0.2, "steps": 2}, return_immediately=True)
            task = await send(client, sleep)
            assert state(task) in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
            assert task.context_id == task.id
            assert task.metadata["ttlMs"] > 0 and task.metadata["operation"] == "demo.sleep"
            done = await poll(client, task.id, lambda t: state(t) == "TASK_STATE_COMPLETED")
            [artifact] = done.artifacts
            assert as_json(artifact.parts[0])["data"] == {"slept": 0.2}
            assert done.status.timestamp.seconds > 0

    run(scenario)


def test_default_send_blocks_until_the_job_finishes(live_url: str, users: Any) -> None:
    _, token = users.new()

    async def scenario() -> None:
        async with a2a_client(live_url, token) as client:
            task = await send(client, order("test.noop", {}))
            assert state(task) == "TASK_STATE_COMPLETED"
            assert as_json(task.artifacts[0].parts[0])["data"] == {"ok": True}

    run(scenario)


def test_cancel_then_cancel_again_is_not_cancelable(live_url: str, users: Any, tmp_path: Path) -> None:
    _, token = users.new()
    ledger = tmp_path / "spin.jsonl"

    async def scenario() -> None:
        async with a2a_client(live_url, token) as client:
            task = await send(client, order("test.spin", {"ledger": str(ledger)}, return_immediately=True))
            await poll(client, task.id, lambda t: state(t) == "TASK_STATE_WORKING")
            cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
            # A2A 1.0 §3.1.5 CancelTask returns the task with its cancellation status.
            assert cancelled.id == task.id and state(cancelled) == "TASK_STATE_CANCELED"
            with pytest.raises(TaskNotCancelableError):
                await client.cancel_task(CancelTaskRequest(id=task.id))

    run(scenario)


def test_another_owner_gets_task_not_found_like_a_missing_task(live_url: str, users: Any) -> None:
    _, owner = users.new()
    _, other = users.new()

    async def scenario() -> None:
        async with a2a_client(live_url, owner) as client:
            task = await send(client, order("test.noop", {}))
        async with a2a_client(live_url, other) as client:
            for task_id in (task.id, str(uuid.uuid4()), "not-a-uuid"):
                with pytest.raises(TaskNotFoundError):
                    await client.get_task(GetTaskRequest(id=task_id))
                with pytest.raises(TaskNotFoundError):
                    await client.cancel_task(CancelTaskRequest(id=task_id))
            with pytest.raises(TaskNotFoundError):
                await send(client, answer(task.id, {"approval": {"approved": True}}))
            listed = await client.list_tasks(ListTasksRequest())
            assert task.id not in {t.id for t in listed.tasks}

    run(scenario)


def test_input_required_answered_by_a_message_to_the_task(live_url: str, users: Any) -> None:
    _, token = users.new()

    async def scenario() -> None:
        async with a2a_client(live_url, token) as client:
            task = await send(client, order("demo.refund", {"order_id": "o-1", "amount": 12.5},
                                            context_id="ctx-refunds"))
            assert state(task) == "TASK_STATE_INPUT_REQUIRED"
            assert task.context_id == "ctx-refunds"
            parts = as_json(task.status.message)["parts"]
            requests = next(p["data"]["inputRequests"] for p in parts if "data" in p)
            assert requests["approval"]["params"]["requestedSchema"]["required"] == ["approved"]

            done = await send(client, answer(task.id, {"approval": {"approved": True}}))
            assert state(done) == "TASK_STATE_COMPLETED"
            assert done.context_id == "ctx-refunds"
            result = as_json(done.artifacts[0].parts[0])["data"]
            assert result["status"] == "approved" and result["orderId"] == "o-1"

            with pytest.raises(UnsupportedOperationError):
                await send(client, answer(task.id, {"approval": {"approved": True}}))

    run(scenario)


def test_streaming_send_runs_to_the_end_and_the_server_closes(live_url: str, users: Any) -> None:
    _, token = users.new()

    async def scenario() -> list[dict[str, Any]]:
        async with a2a_client(live_url, token, streaming=True) as client:
            return [as_json(e) async for e in client.send_message(order("demo.sleep", {"seconds": 0.6,
                                                                                        "steps": 3}))]

    events = run(scenario)
    assert "task" in events[0]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert events[-2]["artifactUpdate"]["artifact"]["parts"][0]["data"] == {"slept": 0.6}
    states = [e["statusUpdate"]["status"]["state"] for e in events if "statusUpdate" in e]
    assert all(s.startswith("TASK_STATE_") and s != "TASK_STATE_UNSPECIFIED" for s in states)


def test_subscribe_follows_a_running_task_to_input_required(live_url: str, users: Any) -> None:
    _, token = users.new()

    async def scenario() -> None:
        async with a2a_client(live_url, token, streaming=True) as client:
            refund = order("demo.refund", {"order_id": "o-2", "amount": 1}, return_immediately=True)
            first = [e async for e in client.send_message(refund)]
            task_id = first[0].task.id
            seen = [as_json(e) async for e in client.subscribe(SubscribeToTaskRequest(id=task_id))]
            last = seen[-1].get("statusUpdate", {}).get("status") or seen[-1]["task"]["status"]
            assert last["state"] == "TASK_STATE_INPUT_REQUIRED"
            async with a2a_client(live_url, token) as plain:
                done = await send(plain, answer(task_id, {"approval": {"approved": False, "reason": "no"}}))
                assert state(done) == "TASK_STATE_COMPLETED"
            with pytest.raises(UnsupportedOperationError):
                [e async for e in client.subscribe(SubscribeToTaskRequest(id=task_id))]

    run(scenario)


def test_list_tasks_pages_through_own_tasks_only(live_url: str, users: Any) -> None:
    _, token = users.new()
    _, other = users.new()

    async def scenario() -> None:
        async with a2a_client(live_url, other) as client:
            await send(client, order("test.noop", {}))
        async with a2a_client(live_url, token) as client:
            ids = [(await send(client, order("test.noop", {}))).id for _ in range(3)]
            first = await client.list_tasks(ListTasksRequest(page_size=2))
            assert [t.id for t in first.tasks] == ids[::-1][:2] and first.next_page_token
            second = await client.list_tasks(ListTasksRequest(page_size=2, page_token=first.next_page_token))
            assert [t.id for t in second.tasks] == ids[:1] and not second.next_page_token
            done = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED))
            assert {t.id for t in done.tasks} == set(ids)
            working = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_WORKING))
            assert not working.tasks

    run(scenario)


# -- the wire, without the SDK: bad input gets the right code, never a 500 ----------------------
def rpc(http: httpx.Client, method: str, params: Any, *, token: str = "alice-token",
        version: str | None = "1.0") -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    if version is not None:
        headers["A2A-Version"] = version
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    return http.post("/a2a", json=body, headers=headers)


def error_code(response: httpx.Response) -> int:
    assert response.status_code == 200, response.text
    return int(response.json()["error"]["code"])


def test_requests_without_a_bearer_token_are_401(http: httpx.Client) -> None:
    response = http.post("/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}},
                         headers={"A2A-Version": "1.0"})
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(("method", "params", "code"), [
    ("GetTask", {"id": str(uuid.uuid4())}, -32001),
    ("GetTask", {"id": 12}, -32602),
    ("GetTask", {}, -32602),
    ("Nope", {}, -32601),
    ("SendMessage", {}, -32602),
    ("SendMessage", {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}, -32005),
    ("SendMessage", {"message": {"messageId": "m", "role": "ROLE_USER",
                                 "parts": [{"data": {"operation": "no.such"}}]}}, -32602),
    ("SendMessage", {"message": {"messageId": "m", "role": "ROLE_USER",
                                 "parts": [{"data": {"operation": "demo.sleep",
                                                     "params": {"seconds": "x"}}}]}}, -32602),
    ("SendMessage", {"message": {"messageId": "m", "role": "ROLE_USER", "parts": "nope"}}, -32602),
    ("ListTasks", {"status": "working"}, -32602),
    ("ListTasks", {"pageToken": "garbage!"}, -32602),
    ("ListTasks", {"pageSize": 1000}, -32602),
    ("CreateTaskPushNotificationConfig", {"taskId": str(uuid.uuid4()), "url": "https://8.8.8.8/h"}, -32001),
    ("GetExtendedAgentCard", {}, -32007),
])
def test_malformed_calls_get_the_right_code(http: httpx.Client, method: str, params: Any, code: int) -> None:
    response = rpc(http, method, params)
    assert error_code(response) == code
    if code == -32001:
        assert response.json()["error"]["data"][0]["reason"] == "TASK_NOT_FOUND"


def test_protocol_errors(http: httpx.Client) -> None:
    assert error_code(rpc(http, "GetTask", {"id": "x"}, version=None)) == -32009
    assert error_code(rpc(http, "GetTask", {"id": "x"}, version="0.3")) == -32009
    assert error_code(rpc(http, "GetTask", {"id": str(uuid.uuid4())}, version="1.0.1")) == -32001
    broken = http.post("/a2a", content=b"{not json", headers={"Authorization": "Bearer alice-token",
                                                               "A2A-Version": "1.0"})
    assert error_code(broken) == -32700
    batch = http.post("/a2a", json=[], headers={"Authorization": "Bearer alice-token", "A2A-Version": "1.0"})
    assert error_code(batch) == -32600


def test_push_config_to_a_private_address_is_refused_by_default(http: httpx.Client) -> None:
    sent = rpc(http, "SendMessage", {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": {"operation": "test.noop"}}]},
        "configuration": {"returnImmediately": True,
                          "taskPushNotificationConfig": {"url": "http://127.0.0.1:9/hook"}}})
    assert error_code(sent) == -32602
    assert "private" in sent.json()["error"]["message"]
    listed = rpc(http, "ListTasks", {"pageSize": 100}).json()["result"]["tasks"]
    created = rpc(http, "SendMessage", {
        "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": {"operation": "test.noop"}}]},
        "configuration": {"returnImmediately": True}}).json()["result"]["task"]
    assert created["id"] not in {t["id"] for t in listed}
    for url in ("http://10.1.2.3/h", "http://169.254.169.254/latest", "http://[::1]/h", "ftp://example.com/",
                "http://user:pw@example.com/"):
        refused = rpc(http, "CreateTaskPushNotificationConfig", {"taskId": created["id"], "url": url})
        assert error_code(refused) == -32602, url


def test_stream_errors_before_the_stream_starts_are_plain_json(http: httpx.Client) -> None:
    response = rpc(http, "SubscribeToTask", {"id": str(uuid.uuid4())})
    assert response.headers["Content-Type"].startswith("application/json")
    assert error_code(response) == -32001
    done = rpc(http, "SendMessage", {"message": {"messageId": "m", "role": "ROLE_USER",
                                                 "parts": [{"data": {"operation": "test.noop"}}]}})
    task = done.json()["result"]["task"]
    wait_until(lambda: rpc(http, "GetTask", {"id": task["id"]}).json()["result"]["status"]["state"]
               == "TASK_STATE_COMPLETED", 30, message="the noop job to complete")
    assert error_code(rpc(http, "SubscribeToTask", {"id": task["id"]})) == -32004
    assert json.loads(json.dumps(task))["status"]["timestamp"].endswith("Z")


def test_idempotency_key_in_message_metadata_returns_the_same_task(http: httpx.Client) -> None:
    key = str(uuid.uuid4())

    def submit() -> dict[str, Any]:
        message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "metadata": {"idempotencyKey": key},
                   "parts": [{"data": {"operation": "test.noop"}}]}
        body = rpc(http, "SendMessage", {"message": message, "configuration": {"returnImmediately": True}}).json()
        return dict(body["result"]["task"])

    assert submit()["id"] == submit()["id"]


def test_a_failed_job_reads_as_a_failed_task_with_its_error(live_url: str, users: Any) -> None:
    _, token = users.new()

    async def scenario() -> None:
        async with a2a_client(live_url, token) as client:
            task = await send(client, order("demo.fail", {"message": "disk full"}))
            assert state(task) == "TASK_STATE_FAILED"
            parts = as_json(task.status.message)["parts"]
            assert parts[0]["text"] == "disk full"
            assert parts[1]["data"]["error"]["message"] == "disk full"
            assert not task.artifacts

    run(scenario)
