"""Other agents' tasks as durable steps: MCP servers' tools and A2A agents' messages run as remote tasks.

`ctx.call_tool` and `ctx.send_message` (`running.remote_steps`) create a remote task once, park the job and
resume it when the task ends; `polling` watches the parked ones. `mcp` and `a2a` speak the two protocols over
plain JSON-RPC (httpx), `access` decides which URLs may be called and with which credentials.

Rule: a remote's credentials come from settings only; what a job records of a remote task is its reference.
"""

from __future__ import annotations

from .status import RemoteTaskFailed, Status

__all__ = ["RemoteTaskFailed", "Status"]
