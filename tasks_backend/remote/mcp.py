"""An MCP server's tool as a remote task: the 2026-07-28 tasks extension where the server offers it, else
2025-11-25 tasks, else a plain `tools/call` (whose result then comes at once).

A 2025-11-25 task asks for input on its `tasks/result` stream (`elicitation/create` requests): the stream is
opened only to read them, then closed; the answers are POSTed as JSON-RPC responses to those requests' ids.

Every create carries the step's idempotency key in `_meta` ("io.tasks-backend/idempotencyKey", which this
project's own server honours; others ignore it). A remote reference (`ref`) is a JSON object recorded as a step:
`{"protocol", "url", "taskId", "pollMs"}`, plus `"final"` (a `Status`) when the call answered with its result.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from typing import Any

from .access import END, RemoteChannel, RemoteError
from .status import DEFAULT_POLL_MS, Status

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
IDEMPOTENCY_META = "io.tasks-backend/idempotencyKey"
MODERN_META = {"io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
#: Requests whose `Mcp-Name` header repeats a param (the 2026-07-28 transport routes on these headers).
_NAME_PARAMS = {"tools/call": "name", "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}
_CLIENT = {"name": "tasks-backend", "version": "1"}
#: The TTL asked of a 2025-11-25 task (ms): the server may shorten it.
TASK_TTL_MS = 86_400_000
#: How long a `tasks/result` stream may take to send a waiting 2025 task's first question, and how long to wait
#: after each for another (s): the stream is read for the questions only, the task's end is read with tasks/get.
ASK_WAIT_S, MORE_WAIT_S = 5.0, 0.5
_STATES = {"working": "working", "input_required": "input_required", "completed": "completed",
           "failed": "failed", "cancelled": "cancelled"}


class McpRemote:
    """One MCP conversation partner (any server), through a `RemoteChannel`; 2025 sessions are kept per URL."""

    def __init__(self, channel: RemoteChannel) -> None:
        self.channel = channel
        self._sessions: dict[str, tuple[str, bool]] = {}
        # Looks run on several threads (`looking`): one session is opened per URL, by the first that needs it.
        self._opening: dict[str, threading.Lock] = {}
        self._opening_guard = threading.Lock()

    # -- create ------------------------------------------------------------------------------
    def create(self, url: str, tool: str, arguments: dict[str, Any], key: str) -> dict[str, Any]:
        """Start the tool as a task on the best revision the server offers; returns the ref to record."""
        if self._modern(url):
            params = {"name": tool, "arguments": arguments, "_meta": {**MODERN_META, IDEMPOTENCY_META: key}}
            result = self._call(url, "tools/call", params)
            if result.get("resultType") == "task" or "taskId" in result:
                return {"protocol": "mcp-2026", "url": url, "taskId": str(result["taskId"]),
                        "pollMs": _poll_ms(result)}
            return {"protocol": "mcp-2026", "url": url, "taskId": None, "final": _tool_result(result).to_json()}
        session, tasks = self._session(url, fresh=True)
        params = {"name": tool, "arguments": arguments, "_meta": {IDEMPOTENCY_META: key}}
        if tasks:
            params["task"] = {"ttl": TASK_TTL_MS}
        result, _ = self.channel.call(url, "tools/call", params, _legacy_headers(session))
        task = result.get("task")
        if isinstance(task, dict) and "taskId" in task:
            return {"protocol": "mcp-2025", "url": url, "taskId": str(task["taskId"]), "pollMs": _poll_ms(task)}
        return {"protocol": "mcp-plain", "url": url, "taskId": None, "final": _tool_result(result).to_json()}

    def _modern(self, url: str) -> bool:
        try:
            result = self._call(url, "server/discover", {"_meta": MODERN_META})
        except RemoteError as exc:
            if exc.status is None:
                raise  # unreachable: not a sign of an older server
            return False
        extensions = (result.get("capabilities") or {}).get("extensions") or {}
        return isinstance(extensions, dict) and TASKS_EXTENSION in extensions

    def _call(self, url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """One 2026-07-28 request, with the routing headers its transport asks for."""
        headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
        if method in _NAME_PARAMS:
            headers["Mcp-Name"] = str(params[_NAME_PARAMS[method]])
        return self.channel.call(url, method, params, headers)[0]

    def _session(self, url: str, fresh: bool = False, stale: str | None = None) -> tuple[str, bool]:
        """(Mcp-Session-Id, whether tools/call may run as a task) of a 2025-11-25 session with `url`: the kept one,
        unless `fresh`, or it is `stale` (the server no longer knows it), when another is opened. Threads that
        need one at once wait for the first to open it."""
        if not fresh and stale is None and url in self._sessions:
            return self._sessions[url]
        with self._opening_guard:
            lock = self._opening.setdefault(url, threading.Lock())
        with lock:
            kept = self._sessions.get(url)
            if not fresh and kept is not None and kept[0] != stale:
                return kept  # opened by another thread meanwhile
            return self._open(url)

    def _open(self, url: str) -> tuple[str, bool]:
        """Open a 2025-11-25 session with `url` and keep it (under the URL's lock)."""
        result, headers = self.channel.call(url, "initialize", {
            "protocolVersion": LEGACY, "clientInfo": _CLIENT,
            "capabilities": {"elicitation": {"form": {}}, "tasks": {"requests": {"elicitation": {"create": {}}}}}})
        session = headers.get("Mcp-Session-Id") or ""
        requests = ((result.get("capabilities") or {}).get("tasks") or {}).get("requests") or {}
        tasks = isinstance(requests.get("tools"), dict) and "call" in requests["tools"]
        self.channel.notify(url, "notifications/initialized", _legacy_headers(session, result))
        self._sessions[url] = (session, tasks)
        return self._sessions[url]

    def _legacy(self, url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        session, _ = self._session(url)
        try:
            return self.channel.call(url, method, params, _legacy_headers(session))[0]
        except RemoteError as exc:
            if exc.status not in (400, 404):
                raise
            session, _ = self._session(url, stale=session)  # the session expired: open another
            return self.channel.call(url, method, params, _legacy_headers(session))[0]

    # -- follow ------------------------------------------------------------------------------
    def get(self, ref: dict[str, Any], questions: bool = True) -> Status:
        """How the task stands; `questions=False`: without reading a waiting 2025 task's questions (which only
        the job itself needs)."""
        url, task_id = ref["url"], ref["taskId"]
        if ref["protocol"] == "mcp-2026":
            return modern_status(self._call(url, "tasks/get", {"taskId": task_id, "_meta": MODERN_META}))
        task = self._legacy(url, "tasks/get", {"taskId": task_id})
        task = task.get("task", task) if isinstance(task.get("task"), dict) else task
        state = _STATES.get(str(task.get("status")), "working")
        if state == "input_required" and questions:
            return self._legacy_questions(ref, task)
        if state in ("completed", "failed"):
            final = _tool_result(self._legacy(url, "tasks/result", {"taskId": task_id}))
            if state == "failed" and final.state == "completed":
                final = Status("failed", message=task.get("statusMessage"))
            final.poll_ms = _poll_ms(task)
            return final
        return Status(state, message=task.get("statusMessage"), poll_ms=_poll_ms(task))

    def _legacy_questions(self, ref: dict[str, Any], task: dict[str, Any]) -> Status:
        """A 2025 task asking for input: its questions, read from a `tasks/result` stream (keyed by their request
        ids). A server that sends none while the task still asks cannot be answered by a client that does not hold
        the stream all along: the task counts as failed (and is cancelled), rather than waited on forever."""
        url, task_id = ref["url"], ref["taskId"]
        poll, requests = _poll_ms(task), self._read_questions(url, task_id)
        if requests:
            return Status("input_required", message=task.get("statusMessage"), poll_ms=poll, input_requests=requests)
        again = self._legacy(url, "tasks/get", {"taskId": task_id})
        if _STATES.get(str(again.get("status"))) != "input_required":
            return Status("working", message=again.get("statusMessage"), poll_ms=poll)  # it moved on: look again
        why = ("The remote task (MCP 2025-11-25) asks for input, but its tasks/result stream sent no "
               "elicitation/create request to answer")
        with contextlib.suppress(RemoteError):  # the job fails all the same; the remote ends it at its TTL
            self.cancel(ref)
        return Status("failed", message=why, error={"code": "input_unanswerable", "message": why})

    def _read_questions(self, url: str, task_id: str) -> dict[str, Any]:
        session, _ = self._session(url)
        for attempt in (0, 1):
            stream = self.channel.stream(url, "tasks/result", {"taskId": task_id}, _legacy_headers(session),
                                         read_s=ASK_WAIT_S + MORE_WAIT_S)
            requests: dict[str, Any] = {}
            try:
                deadline = time.monotonic() + ASK_WAIT_S
                while True:
                    message = stream.next(MORE_WAIT_S if requests else deadline - time.monotonic())
                    if message is None or message is END or message.get("id") == stream.id:
                        break  # quiet long enough, ended, or the task's result (whose end tasks/get reads)
                    if message.get("method") == "elicitation/create" and "id" in message:
                        requests[str(message["id"])] = {"method": "elicitation/create",
                                                        "params": message.get("params") or {}}
            finally:
                stream.close()
            if requests or attempt or stream.status not in (400, 404):
                return requests
            session, _ = self._session(url, stale=session)  # the session expired: open another
        return {}

    def answer(self, ref: dict[str, Any], responses: dict[str, Any]) -> None:
        if ref["protocol"] == "mcp-2025":
            session, _ = self._session(ref["url"])
            for key, response in responses.items():
                status = self.channel.send(ref["url"], {"id": _request_id(key), "result": response},
                                           _legacy_headers(session))
                if status >= 400:
                    raise RemoteError(f"{ref['url']} refused the answer with HTTP {status}", status=status)
            return
        if ref["protocol"] != "mcp-2026":
            raise RemoteError("answers can be sent to 2026-07-28 and 2025-11-25 tasks only")
        self._call(ref["url"], "tasks/update", {"taskId": ref["taskId"], "inputResponses": responses,
                                                "_meta": MODERN_META})

    def cancel(self, ref: dict[str, Any]) -> None:
        if ref["protocol"] == "mcp-2026":
            self._call(ref["url"], "tasks/cancel", {"taskId": ref["taskId"], "_meta": MODERN_META})
        elif ref["protocol"] == "mcp-2025":
            self._legacy(ref["url"], "tasks/cancel", {"taskId": ref["taskId"]})


def _legacy_headers(session: str, initialized: dict[str, Any] | None = None) -> dict[str, str]:
    headers = {"MCP-Protocol-Version": str((initialized or {}).get("protocolVersion") or LEGACY)}
    if session:
        headers["Mcp-Session-Id"] = session
    return headers


def _request_id(key: str) -> str | int:
    """The id of the `elicitation/create` request a question was keyed by (an integer id keyed as its digits)."""
    return int(key) if re.fullmatch(r"-?\d+", key) else key


def _poll_ms(task: dict[str, Any]) -> int:
    value = task.get("pollIntervalMs", task.get("pollInterval"))
    return int(value) if isinstance(value, int | float) and value > 0 else DEFAULT_POLL_MS


def modern_status(task: dict[str, Any]) -> Status:
    state = _STATES.get(str(task.get("status")), "working")
    poll, message = _poll_ms(task), task.get("statusMessage")
    if state == "completed":
        final = _tool_result(task.get("result") or {})
        final.poll_ms = poll
        return final
    if state == "failed":
        return Status("failed", message=message, error=task.get("error"), poll_ms=poll)
    requests = task.get("inputRequests") if state == "input_required" else None
    return Status(state, message=message, poll_ms=poll, input_requests=requests if isinstance(requests, dict) else {})


def _tool_result(result: dict[str, Any]) -> Status:
    """A `CallToolResult` as an outcome: `structuredContent`, else its one text (as JSON if it parses)."""
    found = result.get("content")
    content: list[Any] = found if isinstance(found, list) else []
    texts = [c.get("text") for c in content if isinstance(c, dict) and c.get("type") == "text"]
    if result.get("isError"):
        return Status("failed", message=" ".join(str(t) for t in texts) or "The tool reported an error.",
                      error={"content": content})
    if "structuredContent" in result:
        return Status("completed", result=result["structuredContent"])
    if len(content) == 1 and len(texts) == 1:
        try:
            return Status("completed", result=json.loads(str(texts[0])))
        except ValueError:
            return Status("completed", result=texts[0])
    return Status("completed", result=content)
