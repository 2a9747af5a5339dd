"""The demo jobs, registered in development and in the tests."""

from __future__ import annotations

import csv
import io
import json
import os
from typing import Any

from marshmallow import Schema, fields, validate

from .running.context import JobContext
from .running.registry import Concurrency, job


class SleepParams(Schema):
    seconds = fields.Float(required=True, validate=validate.Range(min=0, max=86400))
    steps = fields.Integer(load_default=10, validate=validate.Range(min=1, max=10000))


@job("demo.sleep", params=SleepParams, ttl=3600, poll_interval=1, description="Sleep in slices, reporting progress")
def sleep(ctx: JobContext, seconds: float, steps: int) -> dict[str, Any]:
    for i in range(steps):
        ctx.sleep(seconds / steps, hold_worker=True)  # a running job to watch: it keeps its worker
        ctx.progress(i + 1, steps, f"slept {seconds * (i + 1) / steps:g}s of {seconds:g}s")
    return {"slept": seconds}


class FanoutParams(Schema):
    parts = fields.Integer(load_default=3, validate=validate.Range(min=1, max=100))
    pause = fields.Float(load_default=0, validate=validate.Range(min=0, max=3600))


@job("demo.fanout", params=FanoutParams, ttl=7200, poll_interval=1,
     description="Sleep, then run parts as child jobs and wait for them, holding no worker meanwhile")
def fanout(ctx: JobContext, parts: int, pause: float) -> dict[str, Any]:
    ctx.sleep(pause)  # from 5 s on the job parks: its worker is free until the time comes
    ids = [ctx.spawn("demo.sleep", {"seconds": 1, "steps": 1}) for _ in range(parts)]
    return {"parts": ctx.wait_for(ids)}


class ExportParams(Schema):
    rows = fields.Integer(required=True, validate=validate.Range(min=0, max=100_000))


@job("demo.export", params=ExportParams, ttl=3600, poll_interval=1, description="Export a CSV report")
def export(ctx: JobContext, rows: int) -> dict[str, Any]:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["id", "name", "amount"])
    for i in range(rows):
        if i % 1000 == 0:
            ctx.check_cancelled()
            ctx.progress(i, rows, f"exporting rows {i}/{rows}")
        writer.writerow([i + 1, f"item-{i + 1}", f"{(i * 7919) % 10000 / 100:.2f}"])
    ctx.progress(rows, rows, f"exported {rows} rows")
    return {"rows": rows, "contentType": "text/csv", "csv": out.getvalue()}


class RefundParams(Schema):
    order_id = fields.String(required=True, validate=validate.Length(min=1, max=200))
    amount = fields.Float(required=True, validate=validate.Range(min=0, min_inclusive=False))


APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean", "description": "Approve the refund?"},
        "reason": {"type": "string", "description": "Why (optional)"},
    },
    "required": ["approved"],
}


def _issue_refund(refund_id: str, order_id: str, amount: float) -> dict[str, Any]:
    """Stands in for a payment API that deduplicates on `refund_id` (as real ones do)."""
    ledger = os.environ.get("TASKS_BACKEND_DEMO_LEDGER")
    if ledger:
        with open(ledger, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"refundId": refund_id, "orderId": order_id, "amount": amount}) + "\n")
    return {"refundId": refund_id}


@job("demo.refund", params=RefundParams, ttl=7 * 86400, poll_interval=5,
     description="Refund an order after a person approves it")
def refund(ctx: JobContext, order_id: str, amount: float) -> dict[str, Any]:
    answer = ctx.ask("approval", f"Approve a refund of {amount:.2f} for order {order_id}?", APPROVAL_SCHEMA)
    if not answer or not answer.get("approved"):
        return {"status": "rejected", "orderId": order_id, "reason": (answer or {}).get("reason")}
    issued = ctx.step("refund", lambda: _issue_refund(ctx.idempotency_key("refund"), order_id, amount))
    return {"status": "approved", "orderId": order_id, "amount": amount, **issued}


class ChargeParams(Schema):
    customer_id = fields.String(required=True, validate=validate.Length(min=1, max=200))
    amount = fields.Float(required=True, validate=validate.Range(min=0, min_inclusive=False))
    seconds = fields.Float(load_default=1.0, validate=validate.Range(min=0, max=3600))


@job("demo.charge", params=ChargeParams, ttl=3600, poll_interval=1, concurrency=Concurrency(max=2, key="customer_id"),
     description="Charge a customer; at most two charges per customer run at once")
def charge(ctx: JobContext, customer_id: str, amount: float, seconds: float) -> dict[str, Any]:
    ctx.sleep(seconds)
    return {"customerId": customer_id, "amount": amount, "charged": True}


class FailParams(Schema):
    message = fields.String(load_default="demo failure", validate=validate.Length(max=2000))


class DemoFailure(Exception):
    pass


@job("demo.fail", params=FailParams, ttl=3600, poll_interval=1, description="Fail with the given message")
def fail(ctx: JobContext, message: str) -> None:
    raise DemoFailure(message)
