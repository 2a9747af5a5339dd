"""A2A 1.0 rules checked on the wire, each test naming the section of the spec or the proto it holds to.

[spec] is a2aproject/A2A `docs/specification.md` (v1.0); [proto] its `specification/a2a.proto`.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import httpx
import pytest

from tests.adapters.a2a.test_a2a import error_code, rpc
from tests.conftest import wait_until

pytestmark = pytest.mark.usefixtures("worker")


def message(*parts: dict[str, Any], task_id: str | None = None, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": list(parts), **fields}
    if task_id is not None:
        out["taskId"] = task_id
    return {k: v for k, v in out.items() if v is not None}


def noop(http: httpx.Client, token: str, **fields: Any) -> dict[str, Any]:
    """A finished task (a blocking SendMessage of `test.noop`)."""
    sent = rpc(http, "SendMessage", {"message": message({"data": {"operation": "test.noop"}}, **fields)},
               token=token)
    task: dict[str, Any] = sent.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    return task


def listed(http: httpx.Client, token: str, **params: Any) -> dict[str, Any]:
    response = rpc(http, "ListTasks", params, token=token).json()
    assert "result" in response, response
    result: dict[str, Any] = response["result"]
    return result


# -- ListTasks ([spec] §3.1.4, [proto] ListTasksRequest / ListTasksResponse) ---------------------
def test_list_tasks_gives_the_total_and_an_empty_token_on_the_last_page(http: httpx.Client, users: Any) -> None:
    # [proto] ListTasksResponse: tasks, nextPageToken, pageSize and totalSize are all REQUIRED;
    # [spec] §3.1.4: on the final page nextPageToken MUST be "".
    _, token = users.new()
    ids = [noop(http, token)["id"] for _ in range(4)]
    first = listed(http, token, pageSize=2)
    assert [t["id"] for t in first["tasks"]] == ids[::-1][:2]
    assert first["pageSize"] == 2 and first["totalSize"] == 4 and first["nextPageToken"]
    last = listed(http, token, pageSize=2, pageToken=first["nextPageToken"])
    assert [t["id"] for t in last["tasks"]] == ids[::-1][2:]
    assert last == {**last, "nextPageToken": "", "pageSize": 2, "totalSize": 4}
    whole = listed(http, token, pageSize=4)
    assert len(whole["tasks"]) == 4 and whole["nextPageToken"] == ""


def test_list_tasks_puts_the_most_recently_updated_first(http: httpx.Client, users: Any) -> None:
    # [spec] §3.1.4 ListTasks, Ordering: "Implementations MUST return tasks sorted by their status
    # timestamp time in descending order (most recently updated tasks first)": not by creation.
    _, token = users.new()
    sent = rpc(http, "SendMessage", {"message": message({"data": {"operation": "test.ask_pair"}})}, token=token)
    waiting = sent.json()["result"]["task"]
    assert waiting["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", waiting
    later = [noop(http, token)["id"] for _ in range(2)]
    cancelled = rpc(http, "CancelTask", {"id": waiting["id"]}, token=token).json()["result"]
    assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
    first = listed(http, token, pageSize=2)
    rest = listed(http, token, pageSize=2, pageToken=first["nextPageToken"])
    tasks = first["tasks"] + rest["tasks"]
    assert [t["id"] for t in tasks] == [waiting["id"], *later[::-1]]
    stamps = [t["status"]["timestamp"] for t in tasks]
    assert stamps == sorted(stamps, reverse=True)
    assert first["totalSize"] == rest["totalSize"] == 3 and rest["nextPageToken"] == ""


def test_the_answers_page_size_is_the_number_of_tasks_it_holds(http: httpx.Client, users: Any) -> None:
    # [proto] ListTasksResponse.page_size: "The page size used for this response"; the default is 50.
    _, token = users.new()
    for _ in range(3):
        noop(http, token)
    page = listed(http, token)
    assert len(page["tasks"]) == 3 and page["pageSize"] == 3 and page["nextPageToken"] == ""
    empty = listed(http, token, status="TASK_STATE_WORKING")
    assert empty == {"tasks": [], "nextPageToken": "", "pageSize": 0, "totalSize": 0}


def test_filtered_lists_count_and_page_only_matching_tasks(http: httpx.Client, users: Any) -> None:
    # [proto] ListTasksResponse.total_size: "Total number of tasks available (before pagination)",
    # i.e. of those the filters keep.
    _, token = users.new()
    context = f"ctx-{uuid.uuid4()}"
    ours = [noop(http, token, contextId=context)["id"] for _ in range(3)]
    noop(http, token)
    first = listed(http, token, contextId=context, pageSize=2)
    assert [t["id"] for t in first["tasks"]] == ours[::-1][:2] and first["totalSize"] == 3
    rest = listed(http, token, contextId=context, pageSize=2, pageToken=first["nextPageToken"])
    assert [t["id"] for t in rest["tasks"]] == ours[:1] and rest["nextPageToken"] == "" and rest["totalSize"] == 3
    done = listed(http, token, status="TASK_STATE_COMPLETED")
    assert done["totalSize"] == 4 and len(done["tasks"]) == 4


def test_expired_tasks_are_not_counted(http: httpx.Client, users: Any, runtime: Any) -> None:
    # totalSize counts tasks "available": one whose record expired (its TTL) is not.
    name, token = users.new()
    gone, _ = runtime.service.submit(name, "test.noop", {}, ttl_s=1.0)
    kept = noop(http, token)
    wait_until(lambda: runtime.store.get(gone.id) is None, 5, message="the short-lived job to expire")
    page = listed(http, token)
    assert [t["id"] for t in page["tasks"]] == [kept["id"]] and page["totalSize"] == 1


@pytest.mark.parametrize("size", [0, -1, 101, 1.5, "10", True])
def test_page_size_must_be_from_1_to_100(http: httpx.Client, size: Any) -> None:
    # [proto] ListTasksRequest.page_size: "The minimum value is 1. The maximum value is 100."
    assert error_code(rpc(http, "ListTasks", {"pageSize": size})) == -32602


def test_status_timestamp_after_keeps_tasks_updated_at_or_after_it(http: httpx.Client, users: Any) -> None:
    # [proto] ListTasksRequest.status_timestamp_after: "Only tasks with a status timestamp time greater
    # than or equal to this value will be returned."
    _, token = users.new()
    older = noop(http, token)
    newer = noop(http, token)
    assert older["status"]["timestamp"] < newer["status"]["timestamp"]
    since = listed(http, token, statusTimestampAfter=newer["status"]["timestamp"])
    assert [t["id"] for t in since["tasks"]] == [newer["id"]] and since["totalSize"] == 1
    assert listed(http, token, statusTimestampAfter="2000-01-01T00:00:00+00:00")["totalSize"] == 2
    assert listed(http, token, statusTimestampAfter="2999-01-01T00:00:00.5Z")["tasks"] == []


@pytest.mark.parametrize("value", ["yesterday", "2026-01-01T00:00:00", "2026-13-01T00:00:00Z", 1700000000, ""])
def test_an_invalid_status_timestamp_after_is_invalid_params(http: httpx.Client, value: Any) -> None:
    # A ProtoJSON Timestamp is an RFC 3339 string with a zone ([spec] §5.6.1); anything else is -32602.
    assert error_code(rpc(http, "ListTasks", {"statusTimestampAfter": value})) == -32602


def test_a_history_length_above_the_servers_limit_is_clamped(http: httpx.Client, users: Any) -> None:
    # [proto] GetTaskRequest / ListTasksRequest history_length: "The server MUST NOT return more messages
    # than the provided value, but MAY apply a lower limit." A negative count is still invalid.
    _, token = users.new()
    task = noop(http, token)
    got = rpc(http, "GetTask", {"id": task["id"], "historyLength": 100_000}, token=token).json()
    assert got["result"]["id"] == task["id"] and "history" not in got["result"]
    assert listed(http, token, historyLength=100_000)["totalSize"] == 1
    assert error_code(rpc(http, "GetTask", {"id": task["id"], "historyLength": -1}, token=token)) == -32602


# -- messages ([proto] Message, [spec] §3.1.1, §3.3.2) -----------------------------------------
ORDER = {"data": {"operation": "test.noop"}}


@pytest.mark.parametrize("fields", [{"messageId": None}, {"role": None}, {"messageId": ""},
                                    {"role": "ROLE_UNSPECIFIED"}, {"role": "user"}])
def test_a_message_without_message_id_or_role_is_refused(http: httpx.Client, fields: dict[str, Any]) -> None:
    # [proto] Message: message_id and role are REQUIRED.
    sent = rpc(http, "SendMessage", {"message": message(ORDER, **fields), "configuration": {"returnImmediately": True}})
    assert error_code(sent) == -32602


def test_a_text_only_message_is_content_type_not_supported(http: httpx.Client) -> None:
    # [spec] §3.3.2 / §5.4: ContentTypeNotSupportedError (-32005) names what is wrong with a part's type.
    sent = rpc(http, "SendMessage", {"message": message({"text": "export my report"})})
    assert error_code(sent) == -32005
    assert sent.json()["error"]["data"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"


@pytest.mark.parametrize("part", [{"text": "more"}, {"data": {"something": "else"}}, {"data": {"inputResponses": {}}}])
def test_a_message_to_a_finished_task_is_refused_for_its_state(http: httpx.Client, users: Any,
                                                               part: dict[str, Any]) -> None:
    # a2a.md §1.4 / [spec] §3.4: a message to a terminal task is UnsupportedOperationError, whatever it holds.
    _, token = users.new()
    task = noop(http, token)
    sent = rpc(http, "SendMessage", {"message": message(part, task_id=task["id"])}, token=token)
    assert error_code(sent) == -32004


# -- the JSON-RPC envelope ([spec] §9, JSON-RPC 2.0 §5) --------------------------------------------
@pytest.mark.parametrize(("body", "request_id"), [
    ({"jsonrpc": "1.0", "id": "req-1", "method": "GetTask", "params": {}}, "req-1"),
    ({"jsonrpc": "2.0", "id": 42, "params": {}}, 42),
    ({"jsonrpc": "2.0", "id": 43, "method": 7}, 43),
    ({"id": [1], "method": "GetTask"}, None),
    ({"jsonrpc": "2.0", "id": True}, None),
])
def test_invalid_requests_answer_with_their_id_when_it_was_readable(http: httpx.Client, body: dict[str, Any],
                                                                    request_id: Any) -> None:
    # JSON-RPC 2.0 §5: the id is Null only "if there was an error in detecting the id".
    response = http.post("/a2a", json=body, headers={"Authorization": "Bearer alice-token", "A2A-Version": "1.0"})
    assert error_code(response) == -32600
    assert response.json()["id"] == request_id


# -- the agent card ([spec] §4.4.5 AgentSkill) -------------------------------------------------------
_TYPES: dict[str, tuple[type, ...]] = {"number": (int, float), "integer": (int,), "string": (str,),
                                       "boolean": (bool,), "array": (list,), "object": (dict,)}


def schema_problems(schema: dict[str, Any], value: dict[str, Any]) -> list[str]:
    """What in `value` breaks the flat object schema the registry publishes for an operation."""
    props = schema.get("properties") or {}
    problems = [f"{name}: required" for name in schema.get("required", []) if name not in value]
    if schema.get("additionalProperties") is False:
        problems += [f"{name}: not allowed" for name in value if name not in props]
    for name, item in value.items():
        prop = props.get(name) or {}
        kind = prop.get("type")
        if kind and (not isinstance(item, _TYPES[kind]) or (isinstance(item, bool) and kind != "boolean")):
            problems.append(f"{name}: not {kind}")
        elif isinstance(item, int | float) and not prop.get("minimum", item) <= item <= prop.get("maximum", item):
            problems.append(f"{name}: out of range")
        elif isinstance(item, str) and not prop.get("minLength", 0) <= len(item) <= prop.get("maxLength", len(item)):
            problems.append(f"{name}: bad length")
    return problems


def test_skill_examples_satisfy_their_own_schemas(http: httpx.Client, runtime: Any) -> None:
    # [spec] AgentSkill.examples: example prompts for the skill; each here is the data part to send.
    for skill in http.get("/.well-known/agent-card.json").json()["skills"]:
        schema = runtime.registry.json_schema(skill["id"])
        for text in skill["examples"]:
            example = json.loads(text)
            assert example["operation"] == skill["id"]
            assert schema_problems(schema, example["params"]) == [], (skill["id"], example)
            runtime.registry.get(skill["id"]).load_params(example["params"])  # what the server itself checks


def test_skill_descriptions_end_their_sentences(http: httpx.Client) -> None:
    # [spec] AgentSkill.description is read by people and models: "asks, then pays once Send a data part"
    # ran two sentences together.
    for skill in http.get("/.well-known/agent-card.json").json()["skills"]:
        assert skill["description"].strip()
        assert not re.search(r"[^.!?] Send a data part", skill["description"]), skill["description"]


def test_the_zero_status_means_no_filter(http: httpx.Client, users: Any) -> None:
    # [proto] TaskState: TASK_STATE_UNSPECIFIED is the enum's zero value, which ProtoJSON clients may send.
    _, token = users.new()
    noop(http, token)
    assert listed(http, token, status="TASK_STATE_UNSPECIFIED")["totalSize"] == 1
