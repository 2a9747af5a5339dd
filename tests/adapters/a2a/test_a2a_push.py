"""A2A push notifications end to end: a2a-sdk client, the app over HTTP, a worker delivering to a
webhook receiver on loopback (the guard is configured to allow loopback for this app and worker)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types import (
    AuthenticationInfo,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    StreamResponse,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import TaskNotFoundError
from google.protobuf import json_format
from werkzeug.serving import make_server

from adapters.a2a.push import MASK
from adapters.app import create_app
from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import free_port
from tasks_backend.devtools.receivers import Receiver
from tasks_backend.push.subscriptions import MAX_CONFIGS_PER_JOB, PushStore
from tasks_backend.service.runtime import build_runtime
from tests.adapters.a2a.test_a2a import a2a_client, error_code, order, rpc, send, state
from tests.conftest import make_settings, wait_until
from tests.support.lag import LaggyRelay
from tests.support.procs import Proc, worker_process
from tests.tasks_backend.push.test_webhook import REFUSED, url_of


@pytest.fixture(scope="module")
def push_settings(redis_base: str, token_file: Path) -> Settings:
    """Its own key prefix and queue, so the worker below serves only this module's jobs."""
    return make_settings(redis_base, tokens_file=str(token_file), push_allow_private=True,
                         public_url=f"http://127.0.0.1:{free_port()}")


@pytest.fixture(scope="module")
def push_url(push_settings: Settings) -> Iterator[str]:
    port = int(push_settings.public_url.rsplit(":", 1)[1])
    server = make_server("127.0.0.1", port, create_app(runtime=build_runtime(push_settings)), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield push_settings.public_url
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def push_worker(push_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """`tasks-backend worker` in its own process, started exactly as in production (push delivery
    installed by `workers.main`). A separate process because a second in-process test worker would
    stop the session's one when it stops."""
    log = tmp_path_factory.mktemp("a2a-push") / "worker.log"
    proc = worker_process(push_settings, log, pool="threads", concurrency=2, TASKS_BACKEND_PUSH_ALLOW_PRIVATE="1")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def test_webhook_receives_each_event_with_the_configured_headers(push_url: str, push_worker: Proc,
                                                                 receiver: Receiver, users: Any) -> None:
    _, token = users.new()
    auth = AuthenticationInfo(scheme="Bearer", credentials="hook-secret")
    config = TaskPushNotificationConfig(url=receiver.url, token="tok-1", authentication=auth)

    async def scenario() -> str:
        async with a2a_client(push_url, token, push_notification_config=config) as client:
            sleep = order("demo.sleep", {"seconds": 0.3, "steps": 3}, return_immediately=True)
            task = await send(client, sleep)
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id))
            assert [c.id for c in listed.configs] == [task.id]
            return task.id

    task_id = asyncio.run(scenario())
    wait_until(lambda: "TASK_STATE_COMPLETED" in receiver.states(), 30, message="the final notification")
    events = [json_format.ParseDict(body, StreamResponse()) for body in receiver.bodies()]
    assert {e.status_update.task_id or e.artifact_update.task_id for e in events} == {task_id}
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[-2:] == ["artifact_update", "status_update"]
    assert json_format.MessageToDict(events[-2].artifact_update.artifact.parts[0])["data"] == {"slept": 0.3}
    states = receiver.states()
    assert states[0] == "TASK_STATE_SUBMITTED" and "TASK_STATE_WORKING" in states
    for headers, _ in receiver.calls:
        assert headers["Authorization"] == "Bearer hook-secret"
        assert headers["X-A2A-Notification-Token"] == "tok-1"
        assert headers["Content-Type"] == "application/json"


def test_push_configs_are_managed_per_task_and_owner(push_url: str, push_worker: Proc, receiver: Receiver,
                                                     users: Any, tmp_path: Path) -> None:
    _, token = users.new()
    _, other = users.new()

    async def scenario() -> None:
        async with a2a_client(push_url, token) as client:
            spin = order("test.spin", {"ledger": str(tmp_path / "spin")}, return_immediately=True)
            task = await send(client, spin)
            created = await client.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=task.id, id="hook-a", url=receiver.url, token="a"))
            assert (created.id, created.task_id) == ("hook-a", task.id)
            got = await client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id="hook-a"))
            assert got.url == receiver.url

            async with a2a_client(push_url, other) as intruder:
                with pytest.raises(TaskNotFoundError):
                    await intruder.get_task_push_notification_config(
                        GetTaskPushNotificationConfigRequest(task_id=task.id, id="hook-a"))
                with pytest.raises(TaskNotFoundError):
                    await intruder.create_task_push_notification_config(
                        TaskPushNotificationConfig(task_id=task.id, url=receiver.url))

            await client.cancel_task(CancelTaskRequest(id=task.id))
            await asyncio.to_thread(wait_until, lambda: "TASK_STATE_CANCELED" in receiver.states(), 30,
                                    message="the cancellation to be pushed")
            await client.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="hook-a"))
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id))
            assert not listed.configs
            with pytest.raises(TaskNotFoundError):
                await client.get_task_push_notification_config(
                    GetTaskPushNotificationConfigRequest(task_id=task.id, id=str(uuid.uuid4())))

    asyncio.run(scenario())


def test_blocking_send_with_a_push_config_still_returns_the_task(push_url: str, push_worker: Proc,
                                                                 receiver: Receiver, users: Any) -> None:
    _, token = users.new()
    config = TaskPushNotificationConfig(url=receiver.url)

    async def scenario() -> None:
        async with a2a_client(push_url, token, push_notification_config=config, streaming=False) as client:
            task = await send(client, order("test.noop", {}))
            assert state(task) == "TASK_STATE_COMPLETED"

    asyncio.run(scenario())
    wait_until(lambda: "TASK_STATE_COMPLETED" in receiver.states(), 30, message="the final notification")


@pytest.mark.parametrize("config", [
    {"url": "https://8.8.8.8/h", "token": "snow-\u2603"},
    {"url": "https://8.8.8.8/h", "authentication": {"scheme": "Bearer", "credentials": "\u2603"}},
    {"url": "https://8.8.8.8/a hook"},
    {"url": "http://[64:ff9b::127.0.0.1]/"},
    {"url": "http://[::127.0.0.1]/"},
    {"url": "http://[2002:7f00:1::]/"},
])
def test_configs_that_could_never_be_delivered_are_invalid_params(http: httpx.Client, config: dict[str, Any]) -> None:
    """Refused up front (-32602), both on a task and with the message that would start one (no task made)."""
    order_part = {"data": {"operation": "test.noop", "params": {}}}
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [order_part]}
    started = rpc(http, "SendMessage", {"message": message, "configuration": {"returnImmediately": True}})
    task_id = started.json()["result"]["task"]["id"]
    assert error_code(rpc(http, "CreateTaskPushNotificationConfig", {"taskId": task_id, **config})) == -32602

    before = rpc(http, "ListTasks", {}).json()["result"]["tasks"]
    refused = rpc(http, "SendMessage", {"message": {**message, "messageId": str(uuid.uuid4())},
                                        "configuration": {"returnImmediately": True,
                                                          "taskPushNotificationConfig": config}})
    assert error_code(refused) == -32602
    assert rpc(http, "ListTasks", {}).json()["result"]["tasks"][0]["id"] == before[0]["id"]


def test_a_send_retried_after_its_task_finished_still_pushes_the_final_state(push_url: str, push_worker: Proc,
                                                                             receiver: Receiver, users: Any) -> None:
    """The soak's client retries a SendMessage (same idempotency key) whose first try created the task but
    failed before its push config was stored; by the retry the task may have finished already."""
    _, token = users.new()
    key = str(uuid.uuid4())

    def send_message(config: dict[str, Any] | None) -> dict[str, Any]:
        message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "metadata": {"idempotencyKey": key},
                   "parts": [{"data": {"operation": "demo.sleep", "params": {"seconds": 0.01}}}]}
        configuration: dict[str, Any] = {"returnImmediately": True}
        if config is not None:
            configuration["taskPushNotificationConfig"] = config
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                "params": {"message": message, "configuration": configuration}}
        reply = httpx.post(f"{push_url}/a2a", json=body, timeout=30,
                           headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"})
        task: dict[str, Any] = reply.json()["result"]["task"]
        return task

    def completed(task_id: str) -> bool:
        body = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}}
        reply = httpx.post(f"{push_url}/a2a", json=body, timeout=30,
                           headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"})
        return bool(reply.json()["result"]["status"]["state"] == "TASK_STATE_COMPLETED")

    first = send_message(None)  # what the first try left behind: the task, no config
    wait_until(lambda: completed(first["id"]), 30, message="the task to finish")
    again = send_message({"url": receiver.url, "token": "retried"})
    assert again["id"] == first["id"]
    wait_until(lambda: "TASK_STATE_COMPLETED" in receiver.states(), 15, message="the final notification")


# -- the limit, owners and secrets -------------------------------------------------------------------
def new_task(http: httpx.Client, token: str) -> str:
    """A task that never finishes by itself: queued, or waiting for input once a worker took it."""
    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER",
               "parts": [{"data": {"operation": "test.ask_pair", "params": {}}}]}
    reply = rpc(http, "SendMessage", {"message": message, "configuration": {"returnImmediately": True}},
                token=token)
    return str(reply.json()["result"]["task"]["id"])


@pytest.fixture(scope="module")
def laggy_url(redis_base: str, token_file: Path) -> Iterator[str]:
    """The app over HTTP with its Redis 20 ms away: the round trips of one request are as far apart as in
    production under load."""
    if getattr(redis_base, "store_url", None):
        pytest.skip("the relay stands in front of one Redis server, not a cluster")
    host, port = redis_base.rsplit("//", 1)[1].rsplit(":", 1)
    with LaggyRelay((host, int(port)), 0.02) as relay:
        settings = make_settings(f"redis://127.0.0.1:{relay.port}", tokens_file=str(token_file))
        server = make_server("127.0.0.1", 0, create_app(runtime=build_runtime(settings)), threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_port}"
        finally:
            server.shutdown()


def test_concurrent_creates_never_store_more_than_the_limit(laggy_url: str, users: Any) -> None:
    """60 creates of distinct configs on one task, all let go at once: the limit holds in the write itself."""
    _, token = users.new()
    with httpx.Client(base_url=laggy_url, timeout=60) as http:
        task_id = new_task(http, token)
    start = threading.Barrier(60)

    def create(i: int) -> int | None:
        with httpx.Client(base_url=laggy_url, timeout=60) as own:
            start.wait()
            reply = rpc(own, "CreateTaskPushNotificationConfig",
                        {"taskId": task_id, "id": f"hook-{i}", "url": f"https://8.8.8.8/h{i}"}, token=token)
        body = reply.json()
        return None if "result" in body else int(body["error"]["code"])

    with ThreadPoolExecutor(60) as pool:
        outcomes = list(pool.map(create, range(60)))
    with httpx.Client(base_url=laggy_url, timeout=60) as http:
        listed = rpc(http, "ListTaskPushNotificationConfigs", {"taskId": task_id}, token=token).json()["result"]
        assert len(listed["configs"]) == MAX_CONFIGS_PER_JOB
        assert outcomes.count(None) == MAX_CONFIGS_PER_JOB
        assert set(outcomes) == {None, -32602}
        # A full task still takes a replacement of a config it holds.
        kept = listed["configs"][0]["id"]
        replaced = rpc(http, "CreateTaskPushNotificationConfig",
                       {"taskId": task_id, "id": kept, "url": "https://8.8.4.4/again"}, token=token).json()
        assert replaced["result"]["url"] == "https://8.8.4.4/again"


def test_an_admin_reads_another_owners_configs_without_secrets_and_changes_none(http: httpx.Client, users: Any,
                                                                                runtime: Any) -> None:
    _, token = users.new()
    task_id = new_task(http, token)
    secret = {"taskId": task_id, "id": "hook", "url": "https://8.8.8.8/h", "token": "tok-secret-1",
              "authentication": {"scheme": "Bearer", "credentials": "cred-secret-1"}}
    assert "result" in rpc(http, "CreateTaskPushNotificationConfig", secret, token=token).json()
    admin = "ops-token"  # `ops` is in TASKS_BACKEND_ADMINS

    for method, params in (("GetTaskPushNotificationConfig", {"taskId": task_id, "id": "hook"}),
                           ("ListTaskPushNotificationConfigs", {"taskId": task_id})):
        reply = rpc(http, method, params, token=admin)
        assert "result" in reply.json(), reply.text
        assert "tok-secret-1" not in reply.text and "cred-secret-1" not in reply.text
    listed = rpc(http, "ListTaskPushNotificationConfigs", {"taskId": task_id}, token=admin).json()["result"]
    assert listed["configs"][0]["token"] == MASK and listed["configs"][0]["url"] == "https://8.8.8.8/h"

    message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "taskId": task_id,
               "parts": [{"data": {"inputResponses": {"name": {"name": "x"}}}}]}
    writes = [
        ("CreateTaskPushNotificationConfig", {"taskId": task_id, "id": "admins", "url": "https://8.8.4.4/a"}),
        ("CreateTaskPushNotificationConfig", {**secret, "url": "https://8.8.4.4/replaced", "token": "admins"}),
        ("DeleteTaskPushNotificationConfig", {"taskId": task_id, "id": "hook"}),
        ("SendMessage", {"message": message, "configuration": {
            "returnImmediately": True, "taskPushNotificationConfig": {"id": "sent", "url": "https://8.8.4.4/s"}}}),
    ]
    for method, params in writes:
        assert error_code(rpc(http, method, params, token=admin)) == -32001, method
    stored = PushStore(runtime.store).configs(task_id)
    assert stored == [{"id": "hook", "taskId": task_id, "url": "https://8.8.8.8/h", "token": "tok-secret-1",
                       "authentication": {"scheme": "Bearer", "credentials": "cred-secret-1"}}]


def test_a_stored_secret_is_never_shown_back_to_its_owner_either(http: httpx.Client, users: Any) -> None:
    _, token = users.new()
    task_id = new_task(http, token)
    config = {"taskId": task_id, "id": "hook", "url": "https://8.8.8.8/h", "token": "tok-secret-2",
              "authentication": {"scheme": "Bearer", "credentials": "cred-secret-2"}}
    masked = {**config, "token": MASK, "authentication": {"scheme": "Bearer", "credentials": MASK}}
    replies = [rpc(http, "CreateTaskPushNotificationConfig", config, token=token),
               rpc(http, "GetTaskPushNotificationConfig", {"taskId": task_id, "id": "hook"}, token=token),
               rpc(http, "ListTaskPushNotificationConfigs", {"taskId": task_id}, token=token)]
    for reply in replies:
        assert "tok-secret-2" not in reply.text and "cred-secret-2" not in reply.text
    assert replies[0].json()["result"] == masked == replies[1].json()["result"]
    assert replies[2].json()["result"]["configs"] == [masked]
    # A config without secrets reads as it was given; the mask sent back as a secret is refused, not stored.
    plain = {"taskId": task_id, "id": "plain", "url": "https://8.8.4.4/h"}
    assert rpc(http, "CreateTaskPushNotificationConfig", plain, token=token).json()["result"] == plain
    for echoed in ({**masked, "authentication": config["authentication"]}, {**masked, "token": "tok-secret-2"}):
        assert error_code(rpc(http, "CreateTaskPushNotificationConfig", echoed, token=token)) == -32602


@pytest.fixture(scope="module")
def owned_task(http_module: httpx.Client) -> str:
    return new_task(http_module, "alice-token")


@pytest.fixture(scope="module")
def http_module(live_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_url, timeout=30) as c:
        yield c


@pytest.mark.parametrize("address", REFUSED)
def test_each_refused_address_is_refused_over_a2a(http_module: httpx.Client, owned_task: str, address: str) -> None:
    """The app as deployed (private targets not allowed): each address, given as a literal, is -32602."""
    params = {"taskId": owned_task, "id": "hook", "url": url_of(address), "token": "t"}
    reply = rpc(http_module, "CreateTaskPushNotificationConfig", params)
    assert error_code(reply) == -32602, address
    assert "special-purpose" in reply.json()["error"]["message"]
