"""The protocol measures: MCP against fastmcp-tasks, A2A against the a2a-sdk server (its database store on
PostgreSQL, and its in-memory one), and each protocol's submit and poll against the product's own HTTP ones."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from .baselines.a2a_ids import seeded_ids
from .load import Load
from .measures import fixed, flow, warm

if TYPE_CHECKING:
    from .run import Bench

MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2026-07-28"}
MCP_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}


def rpc(method: str, params: dict[str, Any]) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": MCP_META}})


def mcp_flow(url: str, headers: dict[str, str]) -> Load:
    """`tools/call` of `bench.noop`, then `tasks/get` every 10 ms until it is completed; again."""
    return Load(url, method="POST", path="/mcp", body=rpc("tools/call", {"name": "bench.noop", "arguments": {}}),
                headers={**MCP_HEADERS, **headers},
                flow={"BENCH_POLL_DELAY_MS": "10", "BENCH_POLL_METHOD": "POST", "BENCH_POLL_PATH": "/mcp",
                      "BENCH_POLL_BODY": rpc("tasks/get", {"taskId": "%s"}),
                      "BENCH_SUBMIT_HEADERS": "Mcp-Method: tools/call|Mcp-Name: bench.noop",
                      "BENCH_POLL_HEADERS": "Mcp-Method: tasks/get",
                      "BENCH_ID_PATTERN": '"taskId":%s*"([^"]+)"',
                      "BENCH_DONE_PATTERN": '"status":%s*"completed"'})


#: A submit of the no-op job, as every HTTP row sends it.
SUBMIT_BODY = json.dumps({"operation": "bench.noop", "params": {}})
MCP_CALL = rpc("tools/call", {"name": "bench.noop", "arguments": {}})
MCP_CALL_HEADERS = {**MCP_HEADERS, "Mcp-Method": "tools/call", "Mcp-Name": "bench.noop"}
MCP_GET = rpc("tasks/get", {"taskId": "%s"})
MCP_GET_HEADERS = {**MCP_HEADERS, "Mcp-Method": "tasks/get"}
A2A_HEADERS = {"Content-Type": "application/json", "A2A-Version": "1.0"}
A2A_SEND = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
    "message": {"messageId": "bench-1", "role": "ROLE_USER",
                "parts": [{"data": {"operation": "bench.noop", "params": {}}}]},
    "configuration": {"returnImmediately": True}}})
A2A_GET = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "%s"}})


def http_flow(url: str, headers: dict[str, str]) -> Load:
    """`POST /v1/jobs` of `bench.noop`, then `GET /v1/jobs/{id}` every 10 ms until it is completed; again."""
    return Load(url, method="POST", path="/v1/jobs", body=SUBMIT_BODY,
                headers={**headers, "Content-Type": "application/json"},
                flow={"BENCH_POLL_DELAY_MS": "10", "BENCH_POLL_PATH": "/v1/jobs/%s",
                      "BENCH_ID_PATTERN": '"taskId":%s*"([^"]+)"', "BENCH_DONE_PATTERN": '"status":%s*"completed"'})


def mcp(bench: Bench) -> None:
    bench.up("product-worker")
    bench.up("fastmcp")
    plan = dataclasses.replace(bench.plan, seconds=bench.plan.mcp_seconds)
    ours_call = Load(bench.url["product"], method="POST", path="/mcp", body=MCP_CALL,
                     headers={**MCP_CALL_HEADERS, **bench.auth()})
    theirs_call = Load(bench.url["fastmcp"], method="POST", path="/mcp", body=MCP_CALL, headers=MCP_CALL_HEADERS)
    warm(bench.plan, ours_call, theirs_call)
    bench.rows.append(bench.paired("MCP tools/call -> task handle", "req/s", ">= 2.5x fastmcp-tasks 4.1.4", 2.5,
                                   plan, fixed(ours_call, plan), fixed(theirs_call, plan),
                                   lambda r: r.rps, settle=bench.drain_product))
    get = Load(bench.url["product"], method="POST", path="/mcp", body=MCP_GET,
               headers={**MCP_GET_HEADERS, **bench.auth()}, ids=bench.poll_ids())
    protocol_rows(bench, "MCP tools/call", ours_call, "MCP tasks/get", get)
    # The calls above leave a backlog of queued jobs on both sides; the end-to-end flow must not wait
    # behind it.
    bench.purge_queues()

    ours_flow = mcp_flow(bench.url["product"], bench.auth())
    theirs_flow = mcp_flow(bench.url["fastmcp"], {})
    bench.rows.append(bench.paired("MCP jobs completed end to end", "jobs/s", ">= 2.5x fastmcp-tasks 4.1.4", 2.5,
                                   plan, flow(ours_flow, plan), flow(theirs_flow, plan), lambda r: r.jobs_per_s))
    bench.down("fastmcp")

def a2a(bench: Bench) -> None:
    """A2A SendMessage (returnImmediately) and GetTask against the a2a-sdk server with its database store on
    PostgreSQL (what a deployment of several processes can run), and GetTask against its in-memory store too.

    The a2a-sdk server executes its agent in its web processes; the product's worker runs meanwhile, so
    both sides create and execute. GetTask reads finished tasks: the product's from Redis, the
    baseline's from PostgreSQL, or from each process's memory (every process holds the same seeded tasks)."""
    bench.up("product-worker")
    bench.up("a2a-sdk-pg")
    headers, send = A2A_HEADERS, A2A_SEND
    send_ours = Load(bench.url["product"], method="POST", path="/a2a", body=send,
                     headers={**headers, **bench.auth()})
    theirs = Load(bench.url["a2a-sdk-pg"], method="POST", path="/a2a", body=send, headers=headers)
    warm(bench.plan, send_ours, theirs)
    bench.rows.append(bench.paired("A2A SendMessage (returnImmediately)", "req/s",
                                   ">= 6x a2a-sdk 1.3.0 (database store, PostgreSQL)", 6.0, bench.plan,
                                   fixed(send_ours, bench.plan), fixed(theirs, bench.plan), lambda r: r.rps,
                                   settle=bench.drain_product))
    bench.purge_queues()
    get = A2A_GET
    get_ours = Load(bench.url["product"], method="POST", path="/a2a", body=get,
                    headers={**headers, **bench.auth()}, ids=bench.poll_ids())
    seeded = bench.write_ids("a2a-sdk", seeded_ids())
    for name, label, target, minimum in (
            ("a2a-sdk-pg", "A2A GetTask", ">= 3x a2a-sdk 1.3.0 (database store, PostgreSQL)", 3.0),
            ("a2a-sdk", "A2A GetTask against an in-memory store", ">= 1.0x a2a-sdk 1.3.0 (in-memory store)", 1.0)):
        bench.up(name)
        theirs = Load(bench.url[name], method="POST", path="/a2a", body=get, headers=headers, ids=seeded)
        warm(bench.plan, get_ours, theirs)
        bench.rows.append(bench.paired(label, "req/s", target, minimum, bench.plan, fixed(get_ours, bench.plan),
                                       fixed(theirs, bench.plan), lambda r: r.rps))
        bench.down(name)
    protocol_rows(bench, "A2A SendMessage", send_ours, "A2A GetTask", get_ours)

def protocol_rows(bench: Bench, submit_name: str, submit: Load, poll_name: str, poll: Load) -> None:
    """A protocol's submit and poll against the product's own HTTP submit and poll, in the same run and
    through the same entrance: what the protocol layer costs (target: >= 0.9x each)."""
    http_submit = Load(bench.url["product"], method="POST", path="/v1/jobs", body=SUBMIT_BODY,
                       headers={**bench.auth(), "Content-Type": "application/json"})
    http_poll = Load(bench.url["product"], path="/v1/jobs/%s", headers=bench.auth(), ids=bench.poll_ids())
    warm(bench.plan, submit, http_submit)
    bench.rows.append(bench.paired(f"{submit_name} vs the product's HTTP submit", "req/s",
                                   ">= 0.9x POST /v1/jobs, same run", 0.9, bench.plan, fixed(submit, bench.plan),
                                   fixed(http_submit, bench.plan), lambda r: r.rps, settle=bench.drain_product))
    bench.purge_queues()
    warm(bench.plan, poll, http_poll)
    bench.rows.append(bench.paired(f"{poll_name} vs the product's HTTP poll", "req/s",
                                   ">= 0.9x GET /v1/jobs/{id}, same run", 0.9, bench.plan, fixed(poll, bench.plan),
                                   fixed(http_poll, bench.plan), lambda r: r.rps))
