"""MCP URL-mode elicitation, over real HTTP: a client that declares `elicitation.url` is sent the job's
web page to answer in the browser; a client that does not keeps the form mode.

[elicitation] is the 2025-11-25 revision's `client/elicitation` page (Capabilities, URL Mode Elicitation
Requests, Completion Notifications for URL Mode Elicitation); the 2026-07-28 page keeps URL mode, with the
capabilities in `_meta["io.modelcontextprotocol/clientCapabilities"]` of each request.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.adapters.mcp.clients.rpc import LEGACY, TASKS, Legacy, Modern, sse_messages
from tests.conftest import wait_until

pytestmark = pytest.mark.usefixtures("worker")

REFUND = {"name": "demo.refund", "arguments": {"order_id": "U-1", "amount": 3.5}, "task": {}}


def initialized(http: httpx.Client, token: str, capabilities: dict[str, Any]) -> Legacy:
    caller = Legacy(http, token)
    answer = caller.post("initialize", {"protocolVersion": LEGACY, "capabilities": capabilities,
                                        "clientInfo": {"name": "raw", "version": "0"}})
    assert answer.status_code == 200, answer.text
    caller.session = answer.headers["Mcp-Session-Id"]
    return caller


def waiting_refund(caller: Legacy) -> str:
    task_id = str(caller.result("tools/call", REFUND)["task"]["taskId"])
    wait_until(lambda: caller.result("tasks/get", {"taskId": task_id})["status"] == "input_required", 30,
               message="the refund to ask for approval")
    return task_id


@contextlib.contextmanager
def result_stream(http: httpx.Client, caller: Legacy, task_id: str) -> Iterator[Iterator[dict[str, Any]]]:
    """The messages of a `tasks/result` stream (request id 5), empty priming events left out."""
    body = {"jsonrpc": "2.0", "id": 5, "method": "tasks/result", "params": {"taskId": task_id}}
    with http.stream("POST", "/mcp", json=body, headers=caller.headers, timeout=60) as response:
        yield (m for _, m in sse_messages(response) if m is not None)


def respond(http: httpx.Client, caller: Legacy, request: dict[str, Any], result: dict[str, Any]) -> None:
    """The client's JSON-RPC response to a request the server sent on the stream."""
    answer = {"jsonrpc": "2.0", "id": request["id"], "result": result}
    assert http.post("/mcp", json=answer, headers=caller.headers).status_code == 202


def final(stream: Iterator[dict[str, Any]]) -> dict[str, Any]:
    """The answer to `tasks/result` that ends the stream."""
    return next(m for m in stream if "result" in m or "error" in m)


def answer_in_the_browser(live_url: str, url: str, token: str) -> None:
    """What the person does with the URL: open it, sign in, approve on the job's page."""
    with httpx.Client(base_url=live_url, timeout=30) as browser:
        opened = browser.get(url)
        assert opened.status_code == 303 and "/ui/signin" in opened.headers["Location"]
        form = browser.get(opened.headers["Location"])
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        next_path = url.removeprefix(live_url)
        signed = browser.post("/ui/signin", data={"csrf": csrf.group(1), "token": token, "next": next_path})
        assert signed.status_code == 303 and signed.headers["Location"].endswith(next_path)
        page = browser.get(next_path)
        assert page.status_code == 200 and 'name="approval.approved"' in page.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        sent = browser.post(f"{next_path}/input", data={"csrf": csrf.group(1), "from": "job", "_action": "accept",
                                                         "approval.approved": "true"})
        assert sent.status_code in (200, 303), sent.text


def test_a_client_with_url_mode_is_sent_the_jobs_page(http: httpx.Client, users: Any, live_url: str) -> None:
    _, token = users.new("url-client")
    caller = initialized(http, token, {"elicitation": {"form": {}, "url": {}}})
    task_id = waiting_refund(caller)
    with result_stream(http, caller, task_id) as stream:
        asked = next(stream)
        # [elicitation] URL Mode Elicitation Requests: `mode: "url"`, a `message`, the `url`, an `elicitationId`;
        # nothing of the form passes through the client.
        assert asked["method"] == "elicitation/create"
        params = asked["params"]
        assert params["mode"] == "url" and params["url"] == f"{live_url}/ui/jobs/{task_id}"
        assert params["message"] == "Approve a refund of 3.50 for order U-1?"
        assert params["elicitationId"] and "requestedSchema" not in params
        assert params["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}

        # `accept` is the person's consent to open the page, not an answer: the job keeps waiting.
        respond(http, caller, asked, {"action": "accept"})
        assert caller.result("tasks/get", {"taskId": task_id})["status"] == "input_required"

        answer_in_the_browser(live_url, params["url"], token)
        # [elicitation] Completion Notifications: the server MAY tell the client the interaction is done.
        done = next(stream)
        assert done == {"jsonrpc": "2.0", "method": "notifications/elicitation/complete",
                        "params": {"elicitationId": params["elicitationId"]}}
        ended = final(stream)
    assert ended["id"] == 5 and ended["result"]["structuredContent"]["status"] == "approved"


@pytest.mark.parametrize("capabilities", [{"elicitation": {}}, {"elicitation": {"form": {}}}],
                         ids=["empty-means-form", "form-only"])
def test_a_client_without_url_mode_keeps_the_form(http: httpx.Client, users: Any,
                                                  capabilities: dict[str, Any]) -> None:
    # [elicitation] Capabilities: "Servers MUST NOT send elicitation requests with modes that are not
    # supported by the client"; an empty `elicitation` object is form mode only.
    _, token = users.new("form-client")
    caller = initialized(http, token, capabilities)
    task_id = waiting_refund(caller)
    with result_stream(http, caller, task_id) as stream:
        asked = next(stream)
        assert asked["params"]["mode"] == "form" and "url" not in asked["params"]
        assert asked["params"]["requestedSchema"]["required"] == ["approved"]
        respond(http, caller, asked, {"action": "accept", "content": {"approved": False}})
        assert final(stream)["result"]["structuredContent"]["status"] == "rejected"


def test_a_form_answer_to_a_url_request_is_taken(http: httpx.Client, users: Any) -> None:
    # SDK clients declare URL mode whenever they have an elicitation handler; a handler that answers every
    # request as a form still gets its answer recorded.
    _, token = users.new("url-client")
    caller = initialized(http, token, {"elicitation": {"form": {}, "url": {}}})
    task_id = waiting_refund(caller)
    with result_stream(http, caller, task_id) as stream:
        asked = next(stream)
        assert asked["params"]["mode"] == "url"
        respond(http, caller, asked, {"action": "accept", "content": {"approved": True}})
        assert final(stream)["result"]["structuredContent"]["status"] == "approved"


def test_declining_to_open_the_page_declines_the_question(http: httpx.Client, users: Any) -> None:
    # [elicitation] Response Actions apply to both modes: `decline` is the person's no.
    _, token = users.new("url-client")
    caller = initialized(http, token, {"elicitation": {"url": {}}})
    task_id = waiting_refund(caller)
    with result_stream(http, caller, task_id) as stream:
        asked = next(stream)
        assert asked["params"]["mode"] == "url"
        respond(http, caller, asked, {"action": "decline"})
        assert final(stream)["result"]["structuredContent"]["status"] == "rejected"


# -- 2026-07-28: the questions are in `tasks/get`, the answers go to `tasks/update` --------------------------
def modern_caps(**elicitation: Any) -> dict[str, Any]:
    return {"io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}, "elicitation": elicitation}}


def modern_waiting_refund(caller: Modern, meta: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    task_id = str(caller.result("tools/call", {"name": REFUND["name"], "arguments": REFUND["arguments"]},
                                meta=meta)["taskId"])
    task = wait_until(lambda: (t := caller.result("tasks/get", {"taskId": task_id}, meta=meta))["status"]
                      == "input_required" and t, 30, message="the refund to ask for approval")
    return task_id, task


def test_a_2026_client_with_url_mode_is_sent_the_jobs_page(http: httpx.Client, users: Any, live_url: str) -> None:
    _, token = users.new("url-client")
    caller, meta = Modern(http, token), modern_caps(form={}, url={})
    task_id, task = modern_waiting_refund(caller, meta)
    asked = task["inputRequests"]["approval"]
    assert asked == {"method": "elicitation/create", "params": {
        "mode": "url", "message": "Approve a refund of 3.50 for order U-1?", "url": f"{live_url}/ui/jobs/{task_id}",
        "elicitationId": f"{task_id}/approval"}}
    consent = {"taskId": task_id, "inputResponses": {"approval": {"action": "accept"}}}
    assert caller.result("tasks/update", consent, meta=meta)["resultType"] == "complete"
    assert caller.result("tasks/get", {"taskId": task_id}, meta=meta)["status"] == "input_required"

    answer_in_the_browser(live_url, asked["params"]["url"], token)
    done = wait_until(lambda: (t := caller.result("tasks/get", {"taskId": task_id}, meta=meta))["status"]
                      == "completed" and t, 30, message="the refund to finish")
    assert done["result"]["structuredContent"]["status"] == "approved"


def test_a_2026_client_without_url_mode_keeps_the_form(http: httpx.Client, users: Any) -> None:
    _, token = users.new("form-client")
    _, task = modern_waiting_refund(Modern(http, token), modern_caps())
    params = task["inputRequests"]["approval"]["params"]
    assert params["mode"] == "form" and params["requestedSchema"]["required"] == ["approved"] and "url" not in params
