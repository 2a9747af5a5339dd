"""Built-in operations: run by every worker without a job module naming them, started by the service only.

`tasks_backend.bulk` cancels or reruns the jobs a filter matches (`POST /v1/jobs/bulk`). It is durable as any job
is: it records the matching ids as its first step, then each batch's outcome as a step of its own, so a run
after a lost worker or a restart skips what is recorded; a rerun in a batch that was cut short is made with an
idempotency key from the bulk job's id and the original's, so its replay answers the same new job. The service
does the acting (`BulkActor`), as the bulk job's owner with the rights the settings give that principal now.
"""

from __future__ import annotations

from typing import Any, Protocol

from marshmallow import Schema, fields, validate

from .registry import JobSpec, Operation, Operations

BULK = "tasks_backend.bulk"
#: The actions a bulk job takes.
ACTIONS = ("cancel", "rerun")
#: Jobs acted on per recorded step.
BATCH = 25


class BulkActor(Protocol):
    """What the bulk operation asks of the service (`service.bulk`)."""

    def bulk_match(self, owner: str, bulk_id: str, action: str, filter_wire: dict[str, Any]) -> list[str]: ...

    def bulk_apply(self, owner: str, bulk_id: str, action: str, ids: list[str],
                   keep_steps: bool) -> dict[str, Any]: ...


class _BulkParams(Schema):
    action = fields.String(required=True, validate=validate.OneOf(ACTIONS))
    filter = fields.Dict(load_default=dict)
    dryRun = fields.Boolean(load_default=False)
    keepSteps = fields.Boolean(load_default=False)


def bulk(ctx: Any, action: str, filter: dict[str, Any], dryRun: bool, keepSteps: bool) -> dict[str, Any]:
    """Cancel or rerun every job a filter matches, once each."""
    actor: BulkActor | None = ctx.actor
    if actor is None:
        raise RuntimeError("This worker cannot act in bulk: its runtime gave it no job service.")
    ids: list[str] = ctx.step("match", lambda: actor.bulk_match(ctx.owner, ctx.job_id, action, filter))
    result: dict[str, Any] = {"action": action, "dryRun": dryRun, "matched": len(ids), "done": 0, "skipped": 0,
                              "ids": [], "newIds": [], "skippedIds": []}
    if dryRun:
        result["ids"] = ids
        return result
    ctx.progress(0, len(ids), f"{action}: 0 of {len(ids)}")
    for start in range(0, len(ids), BATCH):
        part = ids[start:start + BATCH]
        outcome = ctx.step(f"batch:{start}", lambda part=part: actor.bulk_apply(ctx.owner, ctx.job_id, action,
                                                                                part, keepSteps))
        result["ids"].extend(outcome["ids"])
        result["newIds"].extend(outcome["newIds"])
        result["skippedIds"].extend(outcome["skippedIds"])
        done = start + len(part)
        ctx.progress(done, len(ids), f"{action}: {done} of {len(ids)}")
    result["done"], result["skipped"] = len(result["ids"]), len(result["skippedIds"])
    return result


#: Built-in operations by name.
BUILTINS: dict[str, JobSpec] = {
    BULK: JobSpec(name=BULK, fn=bulk, params=_BulkParams, ttl_s=None, poll_interval_s=1.0,
                  description="Cancel or rerun the jobs a filter matches."),
}


def spec_of(operations: Operations, operation: str) -> Operation:
    """What a submit knows of `operation`: a built-in one's spec, else what `operations` says (which refuses an
    unknown one)."""
    return BUILTINS.get(operation) or operations.get(operation)
