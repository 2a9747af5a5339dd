"""A FastMCP 4.1.4 server with fastmcp-tasks 4.1.4 (the 2026-07-28 tasks extension, its tasks kept in Redis by
Docket), run as its own process: `python -m tests.support.fastmcp_peer PORT REDIS_URL NAME LEDGER`. Its tools run
as tasks: `crunch` works `seconds` then returns, `refuse` fails, `approve` asks for input first. Every call that
starts a task is appended to LEDGER, so a test counts the tasks the server made.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import mcp_types
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp_tasks import TasksExtension


def build(redis_url: str, name: str, ledger: str) -> FastMCP:
    mcp = FastMCP("peer")
    mcp.add_extension(TasksExtension(url=redis_url, name=name))

    def note(entry: str) -> None:
        with open(ledger, "a", encoding="utf-8") as fh:
            fh.write(entry + "\n")

    @mcp.tool(task=True)
    async def crunch(seconds: float) -> dict[str, Any]:
        """Work `seconds`, then return."""
        note(f"crunch {seconds}")
        await asyncio.sleep(seconds)
        return {"crunched": seconds}

    @mcp.tool(task=True)
    async def refuse(why: str) -> dict[str, Any]:
        """Fail with `why`."""
        note(f"refuse {why}")
        raise ToolError(why)

    @mcp.tool(task=True)
    async def approve(item: str, ctx: Context) -> Any:
        """Ask whether to approve `item` (fastmcp-tasks' guard pattern: the task re-runs with the answer)."""
        answers = ctx.input_responses
        if not answers:
            note(f"approve {item}")
            return mcp_types.InputRequiredResult(input_requests={"approval": mcp_types.ElicitRequest(
                params=mcp_types.ElicitRequestFormParams(message=f"Approve {item}?", requested_schema={
                    "type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}))})
        answer = answers["approval"]
        content = getattr(answer, "content", None) or {}
        return {"item": item, "action": getattr(answer, "action", None), "approved": content.get("approved")}

    return mcp


if __name__ == "__main__":
    port, redis_url, name, ledger = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    build(redis_url, name, ledger).run(transport="http", host="127.0.0.1", port=port, path="/mcp",
                                       show_banner=False, log_level="warning")
