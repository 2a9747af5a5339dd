import asyncio
import os
import uuid

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageConfiguration, SendMessageRequest, TaskState
from google.protobuf import json_format

BASE = os.environ["TASKS_BACKEND_URL"]
TOKEN = os.environ["TASKS_BACKEND_TOKEN"]
DONE = {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED}


def message(data: dict, task_id: str = "") -> Message:
    """A user message carrying one data part."""
    part = json_format.ParseDict({"data": data}, Part())
    return Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), task_id=task_id, parts=[part])


async def main() -> None:
    async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        config = ClientConfig(httpx_client=http, streaming=False)
        client = await ClientFactory(config).create_from_url(BASE)  # reads /.well-known/agent-card.json

        # Delegate a job and get the task back at once.
        order = message({"operation": "demo.export", "params": {"rows": 3}})
        request = SendMessageRequest(message=order,
                                     configuration=SendMessageConfiguration(return_immediately=True))
        task = [event.task async for event in client.send_message(request)][0]
        print(task.id, TaskState.Name(task.status.state))

        # Poll at the interval the server suggests, until the task ends.
        while task.status.state not in DONE:
            await asyncio.sleep(task.metadata["pollIntervalMs"] / 1000)
            task = await client.get_task(GetTaskRequest(id=task.id))
        result = json_format.MessageToDict(task.artifacts[0].parts[0])["data"]
        print(TaskState.Name(task.status.state), int(result["rows"]), "rows")

        # A job that needs a person: the (blocking) send returns when it asks.
        refund = message({"operation": "demo.refund", "params": {"order_id": "A-17", "amount": 25}})
        task = [event.task async for event in client.send_message(SendMessageRequest(message=refund))][0]
        print(TaskState.Name(task.status.state), task.status.message.parts[0].text)

        # Answer with a message to the same task.
        approve = message({"inputResponses": {"approval": {"approved": True}}}, task_id=task.id)
        task = [event.task async for event in client.send_message(SendMessageRequest(message=approve))][0]
        print(TaskState.Name(task.status.state), json_format.MessageToDict(task.artifacts[0].parts[0])["data"])
        await client.close()


asyncio.run(main())
