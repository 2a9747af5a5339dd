"""An MCP server's tool as a remote task: the 2026-07-28 tasks extension where the server offers it, else
2025-11-25 tasks, else a plain `tools/call` (whose result then comes at once).

Every create carries the step's idempotency key in `_meta` ("io.tasks-backend/idempotencyKey", which this
project's own server honours; others ignore it). A remote reference (`ref`) is a JSON object recorded as a step:
`{"protocol", "url", "taskId", "pollMs"}`, plus `"final"` (a `Status`) when the call answered with its result.
"""

from __future__ import annotations

import json
from typing import Any

from .access import RemoteChannel, RemoteError
from .status import DEFAULT_POLL_MS, Status

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
IDEMPOTENCY_META = "io.tasks-backend/idempotencyKey"
_MODERN_META = {"io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
#: Requests whose `Mcp-Name` header repeats a param (the 2026-07-28 transport routes on these headers).
_NAME_PARAMS = {"tools/call": "name", "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}
_CLIENT = {"name": "tasks-backend", "version": "1"}
#: The TTL asked of a 2025-11-25 task (ms): the server may shorten it.
TASK_TTL_MS = 86_400_000
_STATES = {"working": "working", "input_required": "input_required", "completed": "completed",
           "failed": "failed", "cancelled": "cancelled"}


class McpRemote:
    """One MCP conversation partner (any server), through a `RemoteChannel`; 2025 sessions are kept per URL."""

    def __init__(self, channel: RemoteChannel) -> None:
        self.channel = channel
        self._sessions: dict[str, tuple[str, bool]] = {}

    # -- create ------------------------------------------------------------------------------
    def create(self, url: str, tool: str, arguments: dict[str, Any], key: str) -> dict[str, Any]:
        """Start the tool as a task on the best revision the server offers; returns the ref to record."""
        if self._modern(url):
            params = {"name": tool, "arguments": arguments, "_meta": {**_MODERN_META, IDEMPOTENCY_META: key}}
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
            result = self._call(url, "server/discover", {"_meta": _MODERN_META})
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

    def _session(self, url: str, fresh: bool = False) -> tuple[str, bool]:
        """(Mcp-Session-Id, whether tools/call may run as a task) of a 2025-11-25 session with `url`."""
        if not fresh and url in self._sessions:
            return self._sessions[url]
        result, headers = self.channel.call(url, "initialize", {
            "protocolVersion": LEGACY, "clientInfo": _CLIENT,
            "capabilities": {"tasks": {"requests": {"elicitation": {"create": {}}}}}})
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
            session, _ = self._session(url, fresh=True)  # the session expired: open another
            return self.channel.call(url, method, params, _legacy_headers(session))[0]

    # -- follow ------------------------------------------------------------------------------
    def get(self, ref: dict[str, Any]) -> Status:
        url, task_id = ref["url"], ref["taskId"]
        if ref["protocol"] == "mcp-2026":
            return _modern_status(self._call(url, "tasks/get", {"taskId": task_id, "_meta": _MODERN_META}))
        task = self._legacy(url, "tasks/get", {"taskId": task_id})
        task = task.get("task", task) if isinstance(task.get("task"), dict) else task
        state = _STATES.get(str(task.get("status")), "working")
        if state in ("completed", "failed"):
            final = _tool_result(self._legacy(url, "tasks/result", {"taskId": task_id}))
            if state == "failed" and final.state == "completed":
                final = Status("failed", message=task.get("statusMessage"))
            final.poll_ms = _poll_ms(task)
            return final
        return Status(state, message=task.get("statusMessage"), poll_ms=_poll_ms(task))

    def answer(self, ref: dict[str, Any], responses: dict[str, Any]) -> None:
        if ref["protocol"] != "mcp-2026":
            raise RemoteError("answers can be sent to 2026-07-28 tasks only")
        self._call(ref["url"], "tasks/update", {"taskId": ref["taskId"], "inputResponses": responses,
                                                "_meta": _MODERN_META})

    def cancel(self, ref: dict[str, Any]) -> None:
        if ref["protocol"] == "mcp-2026":
            self._call(ref["url"], "tasks/cancel", {"taskId": ref["taskId"], "_meta": _MODERN_META})
        elif ref["protocol"] == "mcp-2025":
            self._legacy(ref["url"], "tasks/cancel", {"taskId": ref["taskId"]})


def _legacy_headers(session: str, initialized: dict[str, Any] | None = None) -> dict[str, str]:
    headers = {"MCP-Protocol-Version": str((initialized or {}).get("protocolVersion") or LEGACY)}
    if session:
        headers["Mcp-Session-Id"] = session
    return headers


def _poll_ms(task: dict[str, Any]) -> int:
    value = task.get("pollIntervalMs", task.get("pollInterval"))
    return int(value) if isinstance(value, int | float) and value > 0 else DEFAULT_POLL_MS


def _modern_status(task: dict[str, Any]) -> Status:
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
