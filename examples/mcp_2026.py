import asyncio
import os

import fastmcp_tasks  # noqa: F401  (advertises the tasks extension)
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp_tasks import call_tool_task

URL = os.environ["TASKS_BACKEND_URL"] + "/mcp"
HEADERS = {"Authorization": f"Bearer {os.environ['TASKS_BACKEND_TOKEN']}"}


async def approve(message, response_type, params, context):
    print("asked:", message)
    return {"approved": True}


async def main():
    async with Client(StreamableHttpTransport(URL, headers=HEADERS), elicitation_handler=approve) as client:
        result = await client.call_tool("demo.sleep", {"seconds": 1, "steps": 2})
        print(result.structured_content)                       # {'slept': 1.0}
        task = await call_tool_task(client, "demo.refund", {"order_id": "A-1", "amount": 12.5})
        print(task.task_id, (await task.status()).status)      # ... working
        print((await task.result()).structured_content)        # {'status': 'approved', ...}


asyncio.run(main())
