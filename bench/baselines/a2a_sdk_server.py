"""The A2A server one would write with the Python a2a-sdk 1.3.0: its JSON-RPC routes, its default request
handler and one of its task stores, with one agent that completes every task at once.

Runs in `.venv-bench`, served by gunicorn with the product's settings plus an ASGI worker class:
`gunicorn 'bench.baselines.a2a_sdk_server:create_app()' -k uvicorn_worker.UvicornWorker`. With
`BENCH_A2A_DATABASE_URL` set the store is the SDK's `DatabaseTaskStore` there (PostgreSQL through asyncpg:
what a deployment of several processes needs, since each sees the others' tasks), its table made and its
`SEEDED` completed tasks written once beforehand (`python -m bench.baselines.a2a_sdk_server seed`). Without it
the store is the in-memory one, which lives in each process: every process starts with the same seeded tasks.
wrk's GetTask reads them at random (ids from `seeded_ids`).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskStore, TaskUpdater
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


def _database_store(url: str, *, create_table: bool) -> TaskStore:
    from a2a.server.tasks import DatabaseTaskStore  # needs SQLAlchemy and asyncpg: imported only when used
    from sqlalchemy.ext.asyncio import create_async_engine

    return DatabaseTaskStore(create_async_engine(url, pool_size=20), create_table=create_table)


async def _seed(store: TaskStore) -> None:
    context = ServerCallContext()  # an unauthenticated caller, as wrk's requests are
    for task_id in seeded_ids():
        await store.save(Task(id=task_id, context_id=task_id,
                              status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED)), context)


def seed(url: str) -> None:
    """Make the database store's table and write the seeded tasks, once, before the server's processes start."""
    async def run() -> None:
        store = _database_store(url, create_table=True)
        await _seed(store)
        await store.engine.dispose()  # type: ignore[attr-defined]

    asyncio.run(run())


def create_app() -> Any:
    url = os.environ.get("BENCH_A2A_DATABASE_URL")
    card = AgentCard(
        name="bench-baseline", description=f"a2a-sdk with its {'database' if url else 'in-memory'} task store",
        version="1.0",
        supported_interfaces=[AgentInterface(url="http://127.0.0.1/a2a", protocol_binding="JSONRPC",
                                             protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=False), default_input_modes=["application/json"],
        default_output_modes=["application/json"],
        skills=[AgentSkill(id="bench.noop", name="bench.noop", description="Do nothing", tags=["bench"])])
    store = _database_store(url, create_table=False) if url else InMemoryTaskStore()
    handler = DefaultRequestHandler(agent_executor=NoopAgent(), task_store=store, agent_card=card)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if not url:
            await _seed(store)  # each process's own memory
        yield

    return Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/a2a")],
                     lifespan=lifespan)


if __name__ == "__main__":
    if sys.argv[1:2] != ["seed"] or not os.environ.get("BENCH_A2A_DATABASE_URL"):
        raise SystemExit("usage: BENCH_A2A_DATABASE_URL=... python -m bench.baselines.a2a_sdk_server seed")
    seed(os.environ["BENCH_A2A_DATABASE_URL"])
