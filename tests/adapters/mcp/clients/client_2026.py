"""Drive the server with the 2026-07-28 client (fastmcp + fastmcp-tasks); print one JSON line per step.

Usage: client_2026.py URL TOKEN. Runs inside the client's own environment, not the project's.
"""

import asyncio
import json
import sys

import fastmcp_tasks  # noqa: F401  (advertises io.modelcontextprotocol/tasks on every Client)
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.exceptions import ToolError
from fastmcp_tasks import call_tool_task

IDEMPOTENCY_META = "io.tasks-backend/idempotencyKey"
asked = []


def emit(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


async def approve(message, response_type, params, context):
    asked.append(message)
    return {"approved": True, "reason": "looks right"}


async def main(url, token):
    transport = StreamableHttpTransport(url, headers={"Authorization": f"Bearer {token}"})
    async with Client(transport, elicitation_handler=approve) as client:
        tools = await client.list_tools()
        emit("tools", names=sorted(t.name for t in tools))

        result = await client.call_tool("demo.sleep", {"seconds": 0.2, "steps": 2})
        emit("transparent", data=result.structured_content, is_error=result.is_error)

        task = await call_tool_task(client, "demo.export", {"rows": 3})
        final = await task.wait(timeout=60)
        result = await task.result()
        emit("task", task_id=task.task_id, status=final.status, data=result.structured_content)

        task = await call_tool_task(client, "demo.sleep", {"seconds": 120, "steps": 1200})
        await task.wait(state="working", timeout=60)
        await task.cancel()
        final = await task.wait(timeout=60)
        emit("cancel", task_id=task.task_id, status=final.status)

        task = await call_tool_task(client, "demo.refund", {"order_id": "A-1", "amount": 12.5})
        parked = await task.wait(state="input_required", timeout=60)
        result = await task.result()
        emit("input", task_id=task.task_id, parked=parked.status, keys=sorted(parked.input_requests or {}),
             asked=asked, data=result.structured_content)

        try:
            await client.call_tool("demo.fail", {"message": "boom"})
            emit("failed", raised=False)
        except ToolError as exc:
            emit("failed", raised=True, message=str(exc))

        meta = {IDEMPOTENCY_META: "client-2026-key"}
        first = await call_tool_task(client, "demo.sleep", {"seconds": 0}, meta=meta)
        second = await call_tool_task(client, "demo.sleep", {"seconds": 0}, meta=meta)
        emit("idempotent", first=first.task_id, second=second.task_id)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
