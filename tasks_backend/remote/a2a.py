"""An A2A 1.0 agent's message as a remote task (JSON-RPC binding: SendMessage, GetTask, CancelTask).

The message id is the step's idempotency key, the same on every replay; it also goes in `metadata.idempotencyKey`
(which this project's own agent honours). A reply that is a Message, or a Task already terminal, is the result at
once. An agent asking for input is asked in this job: with MCP-style `inputRequests` in a data part where the agent
sends them (this project does), else as one free-text question keyed `REPLY_KEY`, answered with a text message.
"""

from __future__ import annotations

import uuid
from typing import Any

from .access import RemoteChannel, RemoteError
from .status import DEFAULT_POLL_MS, Status

HEADERS = {"A2A-Version": "1.0"}
#: PushNotificationNotSupportedError: the agent takes no push notification config.
PUSH_NOT_SUPPORTED = -32003
#: The key of the one question made from an agent's free-text request for input.
REPLY_KEY = "reply"
REPLY_SCHEMA = {"type": "object", "properties": {"reply": {"type": "string", "title": "Reply"}},
                "required": ["reply"]}
_STATES = {"TASK_STATE_SUBMITTED": "working", "TASK_STATE_WORKING": "working",
           "TASK_STATE_INPUT_REQUIRED": "input_required", "TASK_STATE_AUTH_REQUIRED": "input_required",
           "TASK_STATE_COMPLETED": "completed", "TASK_STATE_FAILED": "failed",
           "TASK_STATE_CANCELED": "cancelled", "TASK_STATE_REJECTED": "rejected"}
_IDS = uuid.UUID("0b5e3f0a-9d7c-4a51-8f0e-2f1c9a6e7d42")


def message_id(key: str) -> str:
    """The message id a step's key stands for: the same on every replay."""
    return str(uuid.uuid5(_IDS, key))


def as_message(message: Any) -> dict[str, Any]:
    """A job's `message` argument as an A2A Message body: a string is a text part, an object with `parts` is
    a Message already, any other JSON object is one data part."""
    if isinstance(message, str):
        return {"parts": [{"text": message}]}
    if isinstance(message, dict) and isinstance(message.get("parts"), list):
        return dict(message)
    if isinstance(message, dict):
        return {"parts": [{"data": message}]}
    raise TypeError("send_message takes a string, a JSON object, or an A2A Message with `parts`.")


class A2ARemote:
    def __init__(self, channel: RemoteChannel) -> None:
        self.channel = channel
        #: A2A suggests no polling interval: the deployment's own (`TASKS_BACKEND_REMOTE_POLL_INTERVAL`).
        self.poll_ms = int(channel.settings.remote_poll_s * 1000)

    def create(self, url: str, message: Any, key: str, push: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send the message (asking for push notifications to `push`, if given); returns the ref to record."""
        body = as_message(message)
        metadata = {**(body.get("metadata") or {}), "idempotencyKey": key}
        body.update({"messageId": message_id(key), "role": "ROLE_USER", "metadata": metadata})
        configuration: dict[str, Any] = {"returnImmediately": True}
        if push is not None:
            configuration["taskPushNotificationConfig"] = push
        try:
            result, _ = self.channel.call(url, "SendMessage", {"message": body, "configuration": configuration},
                                          HEADERS)
        except RemoteError as exc:
            if push is None or exc.code != PUSH_NOT_SUPPORTED:
                raise
            # An agent without push notifications: the same message without the ask (polling wakes the job).
            return self.create(url, message, key)
        task = result.get("task")
        if isinstance(task, dict) and task.get("id"):
            status = task_status(task)
            ref = {"protocol": "a2a", "url": url, "taskId": str(task["id"]),
                   "contextId": task.get("contextId"), "pollMs": self.poll_ms}
            if status.terminal:
                ref["final"] = status.to_json()
            return ref
        said = result.get("message")
        reply: dict[str, Any] = said if isinstance(said, dict) else result
        return {"protocol": "a2a", "url": url, "taskId": None,
                "final": Status("completed", result=_parts_value(reply.get("parts") or [])).to_json()}

    def get(self, ref: dict[str, Any]) -> Status:
        result, _ = self.channel.call(ref["url"], "GetTask", {"id": ref["taskId"]}, HEADERS)
        status = task_status(result.get("task", result) if isinstance(result.get("task"), dict) else result)
        status.poll_ms = self.poll_ms
        return status

    def answer(self, ref: dict[str, Any], responses: dict[str, Any], key: str) -> None:
        if set(responses) == {REPLY_KEY} and isinstance(responses[REPLY_KEY], dict) \
                and set(responses[REPLY_KEY].get("content") or {}) == {REPLY_KEY}:
            parts: list[dict[str, Any]] = [{"text": str(responses[REPLY_KEY]["content"][REPLY_KEY])}]
        else:
            parts = [{"data": {"inputResponses": responses}}]
        body = {"messageId": message_id(key), "role": "ROLE_USER", "taskId": ref["taskId"], "parts": parts}
        if ref.get("contextId"):
            body["contextId"] = ref["contextId"]
        self.channel.call(ref["url"], "SendMessage", {"message": body, "configuration": {"returnImmediately": True}},
                          HEADERS)

    def cancel(self, ref: dict[str, Any]) -> None:
        self.channel.call(ref["url"], "CancelTask", {"id": ref["taskId"]}, HEADERS)


def task_status(task: dict[str, Any]) -> Status:
    found = task.get("status")
    status: dict[str, Any] = found if isinstance(found, dict) else {}
    state = _STATES.get(str(status.get("state")), "working")
    message = status.get("message")
    said: dict[str, Any] = message if isinstance(message, dict) else {}
    parts = [p for p in said.get("parts") or [] if isinstance(p, dict)]
    text = " ".join(str(p["text"]) for p in parts if "text" in p) or None
    data = [p["data"] for p in parts if isinstance(p.get("data"), dict)]
    if state == "completed":
        found = [p for a in task.get("artifacts") or [] if isinstance(a, dict) for p in a.get("parts") or []]
        return Status("completed", result=_parts_value(found or parts), poll_ms=DEFAULT_POLL_MS)
    if state in ("failed", "cancelled", "rejected"):
        error = next((d["error"] for d in data if "error" in d), None)
        return Status(state, message=text, error=error)
    requests: dict[str, Any] = {}
    if state == "input_required":
        requests = next((d["inputRequests"] for d in data if isinstance(d.get("inputRequests"), dict)), {})
        if not requests:
            requests = {REPLY_KEY: {"method": "elicitation/create", "params": {
                "mode": "form", "message": text or "The agent asks for input.", "requestedSchema": REPLY_SCHEMA}}}
    return Status(state, message=text, poll_ms=DEFAULT_POLL_MS, input_requests=requests)


def _parts_value(parts: list[Any]) -> Any:
    """One part's data or text as is; several parts as the list of them."""
    if len(parts) == 1 and isinstance(parts[0], dict):
        if "data" in parts[0]:
            return parts[0]["data"]
        if "text" in parts[0]:
            return parts[0]["text"]
    return parts
