"""`Remotes`: create, read, answer and cancel a remote task by its recorded reference, whatever its protocol."""

from __future__ import annotations

from typing import Any

from ..config import Settings
from .a2a import A2ARemote
from .access import RemoteChannel, RemoteError
from .mcp import McpRemote
from .status import Status

#: JSON-RPC codes a remote answers a read of a task it does not have with: A2A TaskNotFoundError, and the
#: invalid-params error MCP servers use for an unknown task id.
TASK_NOT_FOUND = frozenset({-32001, -32602})


class Remotes:
    def __init__(self, settings: Settings) -> None:
        self.channel = RemoteChannel(settings)
        self.mcp = McpRemote(self.channel)
        self.a2a = A2ARemote(self.channel)

    def guard(self, url: str) -> None:
        self.channel.guard(url)

    def get(self, ref: dict[str, Any], questions: bool = True) -> Status:
        """How the task stands; a remote that says it has no such task (it lost it) ends it as `failed`.
        `questions=False`: a task that asks for input need not say what (a watch only wakes its job)."""
        if "final" in ref:
            return Status.from_json(ref["final"])
        try:
            return self.a2a.get(ref) if ref["protocol"] == "a2a" else self.mcp.get(ref, questions)
        except RemoteError as exc:
            if exc.code not in TASK_NOT_FOUND:
                raise
            return Status("failed", message=f"The remote no longer knows the task: {exc}",
                          error={"code": exc.code, "message": str(exc)})

    def answer(self, ref: dict[str, Any], responses: dict[str, Any], key: str) -> None:
        if ref["protocol"] == "a2a":
            self.a2a.answer(ref, responses, key)
        else:
            self.mcp.answer(ref, responses)

    def cancel(self, ref: dict[str, Any]) -> None:
        if "final" in ref or not ref.get("taskId"):
            return
        if ref["protocol"] == "a2a":
            self.a2a.cancel(ref)
        else:
            self.mcp.cancel(ref)

    def close(self) -> None:
        self.channel.close()
