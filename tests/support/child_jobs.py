"""Jobs for the tests of child jobs' lifetimes: a child whose own TTL is short, and a parent that spawns what it
is told and waits for those and for other ids it is given. Effects go to the ledger file named in the params."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marshmallow import Schema, fields

from tasks_backend import ChildFailed, JobContext, job
from tests.support.jobs import _append

MODULE = __name__


class ShortChildParams(Schema):
    ledger = fields.String(required=True)
    index = fields.Integer(load_default=0)


@job("kidtests.short_child", params=ShortChildParams, ttl=2, poll_interval=0.1)
def short_child(ctx: JobContext, ledger: str, index: int) -> dict[str, Any]:
    """Records its one effect; its operation's TTL is 2 s."""
    ctx.step("effect", lambda: _append(ledger, {"event": "effect", "index": index, "id": ctx.job_id}) or index)
    return {"child": index}


class WaiterParams(Schema):
    kids = fields.List(fields.Dict(), required=True)  # [{"op": ..., "params": {...}}]
    others = fields.List(fields.String(), load_default=list)
    quit_unless = fields.String(load_default=None, allow_none=True)
    wait_first = fields.Integer(load_default=None, allow_none=True)
    raise_failed = fields.Boolean(load_default=False)


@job("kidtests.waiter", params=WaiterParams, ttl=600, poll_interval=0.1)
def waiter(ctx: JobContext, kids: list[dict[str, Any]], others: list[str], quit_unless: str | None,
           wait_first: int | None, raise_failed: bool) -> dict[str, Any]:
    """Spawns `kids`, then waits for them (only the first `wait_first`, if given) and for `others`; returns the
    results, or what `ChildFailed` says (with `raise_failed`, it fails with it). With `quit_unless`, it fails right
    after the spawns unless that file exists."""
    ids = [ctx.spawn(k["op"], k["params"]) for k in kids]
    if quit_unless and not Path(quit_unless).exists():
        raise ValueError("the waiter quit")
    try:
        return {"children": ids, "results": ctx.wait_for(ids[:wait_first] + others)}
    except ChildFailed as exc:
        if raise_failed:
            raise
        return {"children": ids, "failed": exc.child_id, "state": exc.state}
