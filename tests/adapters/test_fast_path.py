"""The fast routes answer exactly as the Flask routes behind the same entrance would, and hand over what
they cannot."""

from __future__ import annotations

import io
import json
import threading
from typing import Any

import pytest
from werkzeug.test import EnvironBuilder, run_wsgi_app

from adapters.a2a.push import Contexts
from adapters.app import create_app
from adapters.entrance import Entrance
from adapters.fast_path import FastRoutes
from tasks_backend.access.auth import Principal
from tasks_backend.errors import JobNotFound
from tasks_backend.model.domain import JobRecord, JobState
from tasks_backend.service.runtime import Runtime, build_runtime
from tests.conftest import ALICE, BOB, CAROL, wait_until

MCP_HEADERS = {**ALICE, "MCP-Protocol-Version": "2026-07-28", "Accept": "application/json, text/event-stream"}
MCP_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}


def _both(flask_app: Any, **request: Any) -> tuple[tuple[int, dict[str, str], Any], ...]:
    """The same request through the entrance with and without its fast routes: (status, headers, JSON body)."""
    entrance = flask_app.wsgi_app
    slow = Entrance(entrance.app, flask_app.extensions["tasks_backend"], entrance.authenticator)
    slow.fast = None
    out = []
    for wsgi in (entrance, slow):
        body, status, headers = run_wsgi_app(wsgi, EnvironBuilder(**request).get_environ())
        raw = b"".join(body)
        out.append((int(status.split()[0]), dict(headers), json.loads(raw) if raw else None))
    return tuple(out)


@pytest.mark.parametrize("request_kw", [
    {"method": "POST", "path": "/v1/jobs", "data": b"{not json", "headers": ALICE},
    {"method": "POST", "path": "/v1/jobs", "json": {"operation": "no.such"}, "headers": ALICE},
    {"method": "POST", "path": "/v1/jobs", "json": {"operation": "test.noop", "extra": 1}, "headers": ALICE},
    {"method": "POST", "path": "/v1/jobs", "json": {"operation": "test.noop"}, "headers": {"Authorization": "x"}},
    {"method": "GET", "path": "/v1/jobs/8c1e7d0e-52a5-4a8e-a6f1-2b0d0a6c4b11", "headers": ALICE},
    {"method": "GET", "path": "/v1/jobs/not-an-id", "headers": {}},
    {"method": "POST", "path": "/mcp", "headers": MCP_HEADERS,
     "json": {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": "nope", "_meta": MCP_META}}},
    {"method": "POST", "path": "/mcp", "headers": MCP_HEADERS,
     "json": {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "no.such", "_meta": MCP_META}}},
])
def test_errors_read_exactly_as_from_flask(flask_app: Any, request_kw: dict[str, Any]) -> None:
    fast, slow = _both(flask_app, **request_kw)
    assert fast[0] == slow[0] >= 400
    assert fast[2] == slow[2]
    for name in ("Content-Type", "WWW-Authenticate", "Retry-After"):
        assert fast[1].get(name) == slow[1].get(name), name


def test_another_owners_job_reads_as_missing_on_every_fast_call(runtime: Runtime, flask_app: Any) -> None:
    record, _ = runtime.service.submit("alice", "test.noop", {})
    poll = flask_app.test_client().get(f"/v1/jobs/{record.id}", headers=BOB)
    missing = flask_app.test_client().get("/v1/jobs/8c1e7d0e-52a5-4a8e-a6f1-2b0d0a6c4b11", headers=BOB)
    assert (poll.status_code, poll.get_json()) == (missing.status_code, missing.get_json()) == (404, missing.get_json())
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": record.id, "_meta": MCP_META}}
    answer = flask_app.test_client().post("/mcp", json=rpc, headers={**MCP_HEADERS, **BOB})
    assert answer.status_code == 400 and answer.get_json()["error"]["code"] == -32602


@pytest.mark.usefixtures("worker")
def test_an_addressee_poll_is_answered_on_the_fast_route_as_by_flask(runtime: Runtime, flask_app: Any) -> None:
    """One who a question is addressed to polls through the same path as the owner: the fast route answers it
    (it no longer hands the request to Flask), with the same limited view, and a stranger's poll is its 404."""
    record, _ = runtime.service.submit("alice", "test.ask_routed", {"to": ["principal:bob"]})
    wait_until(lambda: runtime.service.get("alice", record.id).state is JobState.INPUT_REQUIRED)
    path = f"/v1/jobs/{record.id}"
    environ = EnvironBuilder(method="GET", path=path, headers=BOB).get_environ()
    answer = FastRoutes(runtime).answer(environ, Principal("bob"))
    assert answer is not None and answer.status == 200
    fast, slow = _both(flask_app, method="GET", path=path, headers=BOB)
    assert fast[0] == slow[0] == 200 and fast[2] == slow[2] == json.loads(answer.payload)
    assert fast[2]["owner"] == "alice" and set(fast[2]["inputRequests"]) == {"approve"} and "params" not in fast[2]
    assert fast[1]["Retry-After"] == slow[1]["Retry-After"]
    with pytest.raises(JobNotFound):
        FastRoutes(runtime).answer(EnvironBuilder(method="GET", path=path, headers=CAROL).get_environ(),
                                   Principal("carol"))
    runtime.service.provide_input("bob", record.id, {"approve": {"approved": False}})


def test_a_body_of_unknown_length_is_left_to_flask(flask_app: Any) -> None:
    body = json.dumps({"operation": "test.noop", "params": {}}).encode()
    environ = EnvironBuilder(method="POST", path="/v1/jobs", headers={**ALICE, "Content-Type": "application/json",
                                                                      "Transfer-Encoding": "chunked"}).get_environ()
    environ.pop("CONTENT_LENGTH", None)
    environ["wsgi.input"] = io.BytesIO(body)
    environ["wsgi.input_terminated"] = True
    chunks, status, headers = run_wsgi_app(flask_app.wsgi_app, environ)
    assert status.startswith("202"), b"".join(chunks)
    assert dict(headers)["Location"].startswith("/v1/jobs/")


def test_a_body_over_the_limit_is_refused_before_it_is_read(flask_app: Any) -> None:
    limit = flask_app.extensions["tasks_backend"].settings.max_body_bytes
    big = json.dumps({"operation": "test.noop", "params": {"pad": "x" * limit}})
    answer = flask_app.test_client().post("/v1/jobs", data=big, headers={**ALICE, "Content-Type": "application/json"})
    assert answer.status_code == 413 and answer.mimetype == "application/problem+json"


def test_an_unexpected_error_is_a_bare_500(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    app = create_app(runtime=runtime)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(runtime.service, "submit", broken)
    answer = app.test_client().post("/v1/jobs", json={"operation": "test.noop"}, headers=ALICE)
    assert answer.status_code == 500 and answer.mimetype == "application/problem+json"
    assert "secret" not in answer.get_data(as_text=True)
    assert answer.get_json()["title"] == "Internal error"


A2A_HEADERS = {**ALICE, "A2A-Version": "1.0"}


def _a2a_send(operation: str = "test.noop", **configuration: Any) -> dict[str, Any]:
    message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"data": {"operation": operation, "params": {}}}]}
    return {"jsonrpc": "2.0", "id": 3, "method": "SendMessage",
            "params": {"message": message, "configuration": configuration}}


@pytest.mark.parametrize("body,headers", [
    (_a2a_send("no.such", returnImmediately=True), A2A_HEADERS),
    (_a2a_send(returnImmediately=True), ALICE),  # no A2A-Version: 0.3, not spoken here
    ({"jsonrpc": "2.0", "id": 4, "method": "GetTask", "params": {"id": "8c1e7d0e-52a5-4a8e-a6f1-2b0d0a6c4b11"}},
     A2A_HEADERS),
    ({"jsonrpc": "2.0", "id": 5, "method": "GetTask", "params": {}}, A2A_HEADERS),
    ({"jsonrpc": "2.0", "id": 6, "method": "GetTask", "params": {"id": 7}}, A2A_HEADERS),
])
def test_a2a_errors_read_exactly_as_from_flask(flask_app: Any, body: dict[str, Any], headers: dict[str, str]) -> None:
    fast, slow = _both(flask_app, method="POST", path="/a2a", json=body, headers=headers)
    assert fast[0] == slow[0] == 200  # JSON-RPC errors travel with HTTP 200
    assert fast[2] == slow[2] and "error" in fast[2]
    assert fast[1]["Content-Type"] == slow[1]["Content-Type"] == "application/json"


def test_a2a_get_task_and_an_immediate_send_answer_as_from_flask(runtime: Runtime, flask_app: Any) -> None:
    idle = build_runtime(runtime.settings.with_(queue=f"{runtime.settings.queue}-idle"))  # jobs stay as made
    record, _ = idle.service.submit("alice", "test.noop", {})
    other, _ = idle.service.submit("alice", "test.noop", {})
    try:
        _a2a_reads_and_sends(runtime, flask_app, record, other)
    finally:  # the jobs no worker will claim would be republished by other tests' sweeps
        for job in (record, other):
            runtime.store.discard(job.id)


def _a2a_reads_and_sends(runtime: Runtime, flask_app: Any, record: JobRecord, other: JobRecord) -> None:
    get = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": record.id}}
    fast, slow = _both(flask_app, method="POST", path="/a2a", json=get, headers=A2A_HEADERS)
    assert fast[0] == slow[0] == 200 and fast[2] == slow[2] and fast[2]["result"]["id"] == record.id
    assert fast[2]["result"]["contextId"] == record.id
    # A context the client chose is read back with the record.
    Contexts(runtime.store).set(other, "ctx-1")  # as a send naming its context does
    get["params"]["id"] = other.id
    fast, slow = _both(flask_app, method="POST", path="/a2a", json=get, headers=A2A_HEADERS)
    assert fast[2] == slow[2] and fast[2]["result"]["contextId"] == "ctx-1"
    # Sends make a job each; the answers differ only in what is new about the job.
    fast, slow = _both(flask_app, method="POST", path="/a2a", json=_a2a_send(returnImmediately=True),
                       headers=A2A_HEADERS)
    tasks = [answer[2]["result"]["task"] for answer in (fast, slow)]
    assert tasks[0]["id"] != tasks[1]["id"] and [t["contextId"] for t in tasks] == [t["id"] for t in tasks]
    new = ("id", "taskId", "contextId", "timestamp", "createdAt", "lastUpdatedAt", "ttl", "pollInterval")

    def shape(value: Any) -> Any:  # the answer with what is new about each job taken out
        if isinstance(value, dict):
            return {k: shape(v) for k, v in value.items() if k not in new}
        return [shape(v) for v in value] if isinstance(value, list) else value

    assert shape(tasks[0]) == shape(tasks[1])


def test_only_get_task_and_an_immediate_send_take_the_fast_route(runtime: Runtime) -> None:
    from adapters.fast_path import a2a_hot

    assert a2a_hot({"method": "GetTask"}) and a2a_hot(_a2a_send(returnImmediately=True))
    assert not a2a_hot(_a2a_send()) and not a2a_hot(_a2a_send(returnImmediately=1))
    assert not a2a_hot({"method": "ListTasks", "params": {}}) and not a2a_hot([{"method": "GetTask"}])


def test_a2a_get_task_makes_as_many_round_trips_as_a_poll(runtime: Runtime, flask_app: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The record and its contextId are read together, so GetTask costs what a poll of the same job costs
    (the entrance's own checks included); before, the context was a round trip of its own. The job never
    finishes here (it asks, or waits for a worker): a finished one is answered from memory by both."""
    from redis.connection import AbstractConnection

    record, _ = runtime.service.submit("alice", "test.ask_pair", {})
    client = flask_app.test_client()
    get = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": record.id}}
    sent: list[int] = []
    real_send = AbstractConnection.send_packed_command

    here = threading.get_ident()  # not the worker's threads, which may share the process

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == here:
            sent.append(1)
        return real_send(self, *args, **kwargs)

    def round_trips(call: Any) -> int:
        call()  # connections made and scripts loaded before counting
        sent.clear()
        with monkeypatch.context() as patch:
            patch.setattr(AbstractConnection, "send_packed_command", counting)
            call()
        return len(sent)

    poll = round_trips(lambda: client.get(f"/v1/jobs/{record.id}", headers=ALICE))
    task = round_trips(lambda: client.post("/a2a", json=get, headers=A2A_HEADERS))
    assert client.post("/a2a", json=get, headers=A2A_HEADERS).get_json()["result"]["id"] == record.id
    assert task == poll >= 1


def test_a2a_calls_share_one_push_store_per_process(runtime: Runtime, flask_app: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Making a push store registers its scripts (a SHA1 of each): once per process, not per request."""
    from tasks_backend.push import subscriptions as push

    made: list[object] = []
    real_init = push.PushStore.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(push.PushStore, "__init__", counting)
    record, _ = runtime.service.submit("alice", "test.noop", {})
    get = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": record.id}}
    for _ in range(3):
        assert flask_app.test_client().post("/a2a", json=get, headers=A2A_HEADERS).get_json()["result"]
    assert len(made) <= 1 and runtime.push() is runtime.push()
