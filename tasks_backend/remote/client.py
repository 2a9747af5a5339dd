"""`Remotes`: create, read, answer and cancel a remote task by its recorded reference, whatever its protocol."""

from __future__ import annotations

from typing import Any

from ..config import Settings
from .a2a import A2ARemote
from .access import RemoteChannel
from .mcp import McpRemote
from .status import Status


class Remotes:
    def __init__(self, settings: Settings) -> None:
        self.channel = RemoteChannel(settings)
        self.mcp = McpRemote(self.channel)
        self.a2a = A2ARemote(self.channel)

    def guard(self, url: str) -> None:
        self.channel.guard(url)

    def get(self, ref: dict[str, Any]) -> Status:
        if "final" in ref:
            return Status.from_json(ref["final"])
        return self.a2a.get(ref) if ref["protocol"] == "a2a" else self.mcp.get(ref)

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
