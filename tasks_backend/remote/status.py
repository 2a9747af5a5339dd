"""A remote task's state as both protocols map onto it, and the error a job sees when one did not complete."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: States after which the remote task changes no more.
TERMINAL = frozenset({"completed", "failed", "cancelled", "rejected"})
#: How often to look at a remote task that suggests no interval of its own (ms).
DEFAULT_POLL_MS = 2000


class RemoteTaskFailed(Exception):
    """Raised by `ctx.call_tool` / `ctx.send_message` when the remote task failed, was rejected or cancelled:
    `url` and `task_id` say which, `state` how it ended, `error` what the remote said (None if nothing)."""

    def __init__(self, url: str, task_id: str | None, state: str, message: str | None = None,
                 error: Any = None) -> None:
        self.url, self.task_id, self.state, self.error = url, task_id, state, error
        why = f": {message}" if message else ""
        super().__init__(f"Remote task {task_id or '(none)'} at {url} {state}{why}")


@dataclass
class Status:
    """What one look at a remote task found."""

    state: str  #: working | input_required | completed | failed | cancelled | rejected
    result: Any = None
    message: str | None = None
    error: Any = None
    poll_ms: int | None = None
    #: Open questions, MCP-style: key -> {"method": "elicitation/create", "params": {"message", "requestedSchema"}}
    input_requests: dict[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def outcome(self) -> dict[str, Any]:
        """What the job records once the task ended: its result, or how it failed."""
        if self.state == "completed":
            return {"result": self.result}
        return {"failed": {"state": self.state, "message": self.message, "error": self.error}}

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "result": self.result, "message": self.message, "error": self.error,
                "poll_ms": self.poll_ms, "input_requests": self.input_requests}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Status:
        return cls(**data)
