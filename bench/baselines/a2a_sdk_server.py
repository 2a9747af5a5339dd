"""The A2A server one would write with the Python a2a-sdk 1.3.0: its JSON-RPC routes, its default request
handler and its in-memory task store, with one agent that completes every task at once.

Runs in `.venv-bench`, served by gunicorn with the product's settings plus an ASGI worker class:
`gunicorn 'bench.baselines.a2a_sdk_server:create_app()' -k uvicorn_worker.UvicornWorker`. Its store lives in
each process's memory, so a task is found only by the process that made it; for GetTask every process
starts with the same `SEEDED` completed tasks (ids from `seeded_ids`), which wrk then reads at random.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Task, TaskState, TaskStatus
from starlette.applications import Starlette

from .a2a_ids import seeded_ids


class NoopAgent(AgentExecutor):
    """Completes each task as soon as it runs: the counterpart of the product's `bench.noop`."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        # The SDK wants the task itself first; the status updates follow.
        await event_queue.enqueue_event(Task(id=task_id, context_id=context_id,
                                             status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)))
        await TaskUpdater(event_queue, task_id, context_id).complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


def create_app() -> Any:
    card = AgentCard(
        name="bench-baseline", description="a2a-sdk with its in-memory task store", version="1.0",
        supported_interfaces=[AgentInterface(url="http://127.0.0.1/a2a", protocol_binding="JSONRPC",
                                             protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=False), default_input_modes=["application/json"],
        default_output_modes=["application/json"],
        skills=[AgentSkill(id="bench.noop", name="bench.noop", description="Do nothing", tags=["bench"])])
    store = InMemoryTaskStore()
    handler = DefaultRequestHandler(agent_executor=NoopAgent(), task_store=store, agent_card=card)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        context = ServerCallContext()  # an unauthenticated caller, as wrk's requests are
        for task_id in seeded_ids():
            await store.save(Task(id=task_id, context_id=task_id,
                                  status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED)), context)
        yield

    return Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/a2a")],
                     lifespan=lifespan)
