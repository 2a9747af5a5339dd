"""An a2a-sdk 1.3.0 agent with its database task store (SQLite through SQLAlchemy), run as its own process:
`python -m tests.support.a2a_peer PORT DB_PATH LEDGER`. Each text message is an order:

- `work <seconds>`: works that long, then completes with the artifact text `done <seconds>`;
- `fail <why>`: fails with that message;
- `ask`: asks for input in plain text, then completes with `got <reply>` once the reply comes.

It keeps push notification configs in the same database and sends their notifications (`X-A2A-Notification-Token`).
Every task it starts is appended to LEDGER (one line each), so a test counts the tasks the agent made.
"""

from __future__ import annotations

import asyncio
import sys

import httpx
import uvicorn
from a2a.helpers.proto_helpers import new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import (
    BasePushNotificationSender,
    DatabasePushNotificationConfigStore,
    DatabaseTaskStore,
    TaskUpdater,
)
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part, TaskState
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.applications import Starlette


class Orders(AgentExecutor):
    def __init__(self, ledger: str) -> None:
        self.ledger = ledger

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        text = context.get_user_input().strip()
        if context.current_task is not None:  # a reply to the agent's question
            await updater.add_artifact([Part(text=f"got {text}")], name="result")
            await updater.complete()
            return
        with open(self.ledger, "a", encoding="utf-8") as fh:
            fh.write(f"{context.task_id} {text}\n")
        await event_queue.enqueue_event(new_task(context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED,
                                                 history=[context.message] if context.message else []))
        await updater.start_work()
        verb, _, rest = text.partition(" ")
        if verb == "fail":
            await updater.failed(updater.new_agent_message([Part(text=rest or "failed")]))
        elif verb == "ask":
            await updater.requires_input(updater.new_agent_message([Part(text="Which colour?")]))
        else:
            await asyncio.sleep(float(rest or 1))
            await updater.add_artifact([Part(text=f"done {rest or 1}")], name="result")
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def app(port: int, db: str, ledger: str) -> Starlette:
    url = f"http://127.0.0.1:{port}/a2a"
    card = AgentCard(name="orders", description="Test orders agent", version="1.0",
                     supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
                     capabilities=AgentCapabilities(streaming=False, push_notifications=True),
                     default_input_modes=["text/plain"], default_output_modes=["text/plain"],
                     skills=[AgentSkill(id="orders", name="orders", description="work, fail or ask", tags=["test"])])
    engine = create_async_engine(f"sqlite+aiosqlite:///{db}")
    configs = DatabasePushNotificationConfigStore(engine)
    handler = DefaultRequestHandler(agent_executor=Orders(ledger), task_store=DatabaseTaskStore(engine),
                                    agent_card=card, push_config_store=configs,
                                    push_sender=BasePushNotificationSender(httpx.AsyncClient(), configs))
    return Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/a2a")])


if __name__ == "__main__":
    port, db, ledger = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    uvicorn.run(app(port, db, ledger), host="127.0.0.1", port=port, log_level="warning")
