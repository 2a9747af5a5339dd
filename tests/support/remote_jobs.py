"""Jobs that delegate to other agents: an MCP tool or an A2A message, waited on as a durable step."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields

from tasks_backend import JobContext, RemoteTaskFailed, job


class ToolParams(Schema):
    url = fields.String(required=True)
    tool = fields.String(required=True)
    arguments = fields.Dict(load_default=dict)
    catch = fields.Boolean(load_default=False)


class MessageParams(Schema):
    url = fields.String(required=True)
    message = fields.Raw(required=True)
    catch = fields.Boolean(load_default=False)


def _outcome(call: Any, catch: bool) -> dict[str, Any]:
    try:
        return {"remote": call()}
    except RemoteTaskFailed as exc:
        if not catch:
            raise
        return {"failed": exc.state, "taskId": exc.task_id, "message": str(exc)}


@job("test.remote_tool", params=ToolParams, ttl=600, poll_interval=0.2)
def remote_tool(ctx: JobContext, url: str, tool: str, arguments: dict[str, Any], catch: bool) -> dict[str, Any]:
    """Runs `tool` on the MCP server at `url`; with `catch`, a failed remote task is a result, not a failure."""
    return _outcome(lambda: ctx.call_tool(url, tool, arguments), catch)


@job("test.remote_message", params=MessageParams, ttl=600, poll_interval=0.2)
def remote_message(ctx: JobContext, url: str, message: Any, catch: bool) -> dict[str, Any]:
    """Sends `message` to the A2A agent at `url`."""
    return _outcome(lambda: ctx.send_message(url, message), catch)
