"""Jobs that delegate to other agents: an MCP tool or an A2A message, waited on as a durable step."""

from __future__ import annotations

import datetime as dt
from typing import Any

from marshmallow import Schema, fields

from tasks_backend import JobContext, RemoteTaskFailed, job


class Routed(Schema):
    """Where the remote's questions go: `to`, and a deadline in seconds with the answer to use then."""

    catch = fields.Boolean(load_default=False)
    to = fields.List(fields.String(), load_default=None)
    deadline_s = fields.Float(load_default=None)
    on_timeout = fields.Raw(load_default="fail")


class ToolParams(Routed):
    url = fields.String(required=True)
    tool = fields.String(required=True)
    arguments = fields.Dict(load_default=dict)


class MessageParams(Routed):
    url = fields.String(required=True)
    message = fields.Raw(required=True)


def _routing(to: list[str] | None, deadline_s: float | None, on_timeout: Any) -> dict[str, Any]:
    return {"to": to, "deadline": None if deadline_s is None else dt.timedelta(seconds=deadline_s),
            "on_timeout": on_timeout}


def _outcome(call: Any, catch: bool) -> dict[str, Any]:
    try:
        return {"remote": call()}
    except RemoteTaskFailed as exc:
        if not catch:
            raise
        return {"failed": exc.state, "taskId": exc.task_id, "message": str(exc)}


@job("test.remote_tool", params=ToolParams, ttl=600, poll_interval=0.2)
def remote_tool(ctx: JobContext, url: str, tool: str, arguments: dict[str, Any], catch: bool,
                to: list[str] | None, deadline_s: float | None, on_timeout: Any) -> dict[str, Any]:
    """Runs `tool` on the MCP server at `url`; with `catch`, a failed remote task is a result, not a failure."""
    return _outcome(lambda: ctx.call_tool(url, tool, arguments, **_routing(to, deadline_s, on_timeout)), catch)


@job("test.remote_message", params=MessageParams, ttl=600, poll_interval=0.2)
def remote_message(ctx: JobContext, url: str, message: Any, catch: bool, to: list[str] | None,
                   deadline_s: float | None, on_timeout: Any) -> dict[str, Any]:
    """Sends `message` to the A2A agent at `url`."""
    return _outcome(lambda: ctx.send_message(url, message, **_routing(to, deadline_s, on_timeout)), catch)


class SlowPollParams(Schema):
    seconds = fields.Float(required=True)


@job("test.slow_poll", params=SlowPollParams, ttl=600, poll_interval=30)
def slow_poll(ctx: JobContext, seconds: float) -> dict[str, Any]:
    """Sleeps `seconds` in its worker; its handle asks to be polled every 30 s."""
    ctx.sleep(seconds, hold_worker=True)
    return {"slept": seconds}
