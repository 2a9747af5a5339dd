"""Drive the server with the 2025-11-25 client (mcp 1.x); print one JSON line per step.

Usage: client_2025.py URL TOKEN. Runs inside the client's own environment, not the project's.
"""

import asyncio
import json
import sys
import warnings

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, ElicitResult

IDEMPOTENCY_META = "io.tasks-backend/idempotencyKey"
# mcp 1.30 marks the 2025-11-25 tasks API deprecated (it moved to an extension in 2026); it is what we test.
warnings.filterwarnings("ignore", category=DeprecationWarning)
asked = []


def emit(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


async def approve(context, params):
    meta = params.meta.model_dump(by_alias=True) if params.meta else None
    asked.append({"message": params.message, "meta": meta})
    return ElicitResult(action="accept", content={"approved": True})


async def statuses(session, task_id, until=None):
    seen = []
    async for status in session.experimental.poll_task(task_id):
        seen.append(status.status)
        if status.status == until:
            break
    return seen


async def main(url, token):
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx.Timeout(60, read=120))
    async with http, streamable_http_client(url, http_client=http) as (read, write, _), \
            ClientSession(read, write, elicitation_callback=approve) as session:
        init = await session.initialize()
        emit("initialize", version=init.protocolVersion,
             tasks=init.capabilities.tasks.model_dump(exclude_none=True) if init.capabilities.tasks else None)
        tools = (await session.list_tools()).tools
        emit("tools", support={t.name: t.execution.taskSupport for t in tools if t.execution})

        created = await session.experimental.call_tool_as_task("demo.sleep", {"seconds": 0.2, "steps": 2})
        task_id = created.task.taskId
        seen = await statuses(session, task_id)
        result = await session.experimental.get_task_result(task_id, CallToolResult)
        emit("complete", task_id=task_id, ttl=created.task.ttl, statuses=seen, data=result.structuredContent,
             is_error=result.isError, meta=result.meta)

        created = await session.experimental.call_tool_as_task("demo.fail", {"message": "boom"})
        seen = await statuses(session, created.task.taskId)
        result = await session.experimental.get_task_result(created.task.taskId, CallToolResult)
        emit("failed", statuses=seen, is_error=result.isError, text=result.content[0].text)

        created = await session.experimental.call_tool_as_task("demo.sleep", {"seconds": 120, "steps": 1200})
        cancelled = await session.experimental.cancel_task(created.task.taskId)
        final = await statuses(session, created.task.taskId)
        emit("cancel", task_id=created.task.taskId, returned=cancelled.status, final=final[-1])

        created = await session.experimental.call_tool_as_task("demo.refund", {"order_id": "B-2", "amount": 3})
        seen = await statuses(session, created.task.taskId, until="input_required")
        result = await session.experimental.get_task_result(created.task.taskId, CallToolResult)
        emit("input", task_id=created.task.taskId, statuses=seen, asked=asked, data=result.structuredContent)

        meta = {IDEMPOTENCY_META: "client-2025-key"}
        first = await session.experimental.call_tool_as_task("demo.sleep", {"seconds": 0}, meta=meta)
        second = await session.experimental.call_tool_as_task("demo.sleep", {"seconds": 0}, meta=meta)
        emit("idempotent", first=first.task.taskId, second=second.task.taskId)

        listed, cursor = [], None
        while True:
            page = await session.experimental.list_tasks(cursor)
            listed += [t.taskId for t in page.tasks]
            cursor = page.nextCursor
            if not cursor:
                break
        emit("list", task_ids=listed)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
