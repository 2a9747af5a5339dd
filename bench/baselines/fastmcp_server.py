"""The other MCP task server one could pick: fastmcp 4.1.4 + fastmcp-tasks 4.1.4, Docket on the bench's Redis.

Runs in its own environment (`.venv-bench`), served by gunicorn with the same settings as the product
plus an ASGI worker class: `gunicorn 'bench.baselines.fastmcp_server:create_app()' -k uvicorn_worker.UvicornWorker`.
Each process runs a Docket worker in its lifespan, as fastmcp-tasks does by default.
"""

from __future__ import annotations

import os
from typing import Any

from fastmcp import FastMCP
from fastmcp_tasks import TasksExtension


def create_app() -> Any:
    mcp = FastMCP("bench-baseline")
    mcp.add_extension(TasksExtension(url=os.environ["BENCH_DOCKET_URL"], name="bench"))

    @mcp.tool(name="bench.noop", task=True)
    async def noop() -> dict[str, Any]:
        """Do nothing; return a small result."""
        return {"ok": True}

    return mcp.http_app(path="/mcp", stateless_http=True, json_response=True)
