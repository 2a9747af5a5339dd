import asyncio
import os
import warnings

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, ElicitResult

# mcp 1.x marks its 2025-11-25 task API deprecated (tasks return as an extension in 2026-07-28); it still works.
warnings.filterwarnings("ignore", "The experimental tasks API is deprecated", DeprecationWarning)

URL = os.environ["TASKS_BACKEND_URL"] + "/mcp"
HEADERS = {"Authorization": f"Bearer {os.environ['TASKS_BACKEND_TOKEN']}"}


async def approve(context, params):
    print("asked:", params.message)
    return ElicitResult(action="accept", content={"approved": True})


async def main():
    async with httpx.AsyncClient(headers=HEADERS, timeout=httpx.Timeout(30, read=120)) as http, \
            streamable_http_client(URL, http_client=http) as (read, write, _), \
            ClientSession(read, write, elicitation_callback=approve) as session:
        await session.initialize()
        created = await session.experimental.call_tool_as_task("demo.refund", {"order_id": "B-2", "amount": 3})
        async for status in session.experimental.poll_task(created.task.taskId):
            if status.status == "input_required":
                break                                           # tasks/result asks, then waits for the end
        result = await session.experimental.get_task_result(created.task.taskId, CallToolResult)
        print(result.structuredContent)                         # {'status': 'approved', ...}


asyncio.run(main())
