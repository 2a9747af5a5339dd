"""Jobs used by the tests. Their side effects go to files named in the params, so a test (or a
separate worker process) can observe exactly how often each effect happened."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from marshmallow import Schema, fields

from tasks_backend import ChildFailed, Concurrency, JobContext, job


class Transient(Exception):
    """An error worth retrying."""


def _append(path: str, entry: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


class StepsParams(Schema):
    ledger = fields.String(required=True)
    steps = fields.Integer(load_default=3)
    gate = fields.String(load_default=None, allow_none=True)


@job("test.steps", params=StepsParams, ttl=600, poll_interval=0.2)
def steps(ctx: JobContext, ledger: str, steps: int, gate: str | None) -> dict[str, Any]:
    """Records `steps` effects; before each step after the first, waits for `gate` to exist.

    Every (re)start appends a `start` line with the worker's pid, so a test can find the process
    to kill and count how often the job body ran."""
    _append(ledger, {"event": "start", "pid": os.getpid(), "attempt": ctx.attempt})
    for i in range(steps):
        if i > 0 and gate:
            while not Path(f"{gate}.{i}").exists():
                ctx.sleep(0.02)
        ctx.step(f"s{i}", lambda i=i: _append(ledger, {"event": "effect", "step": i}) or i)
        ctx.progress(i + 1, steps, f"step {i + 1}/{steps}")
    return {"steps": steps}


class NoParams(Schema):
    pass


class FailsUntilParams(Schema):
    ledger = fields.String(required=True)
    switch = fields.String(required=True)
    key = fields.Integer(load_default=0)


@job("test.fails_until", params=FailsUntilParams, ttl=600, poll_interval=0.1)
def fails_until(ctx: JobContext, ledger: str, switch: str, key: int) -> dict[str, Any]:
    """Records two effects as steps, then fails unless the file `switch` exists (what reruns are tried on)."""
    for i in range(2):
        ctx.step(f"s{i}", lambda i=i: _append(ledger, {"event": "effect", "key": key, "step": i,
                                                        "job": ctx.job_id}) or i)
    if not Path(switch).exists():
        raise RuntimeError("failing until switched")
    return {"key": key}


@job("test.noop", params=NoParams, ttl=600, poll_interval=0.1)
def noop(ctx: JobContext) -> dict[str, Any]:
    return {"ok": True}


class FlakyParams(Schema):
    ledger = fields.String(required=True)
    failures = fields.Integer(required=True)


class CountedParams(Schema):
    fail = fields.Boolean(load_default=False)


@job("test.counted", params=CountedParams, ttl=600, poll_interval=0.1)
def counted(ctx: JobContext, fail: bool) -> dict[str, Any]:
    """Only the metrics test runs this, so its counts change by exactly what that test does."""
    if fail:
        raise RuntimeError("counted as failed")
    return {"ok": True}


@job("test.flaky", params=FlakyParams, ttl=600, poll_interval=0.1, retry_on=(Transient,), max_retries=3,
     retry_backoff=0.05)
def flaky(ctx: JobContext, ledger: str, failures: int) -> dict[str, Any]:
    """Fails with `Transient` the first `failures` times it runs."""
    _append(ledger, {"event": "run"})
    runs = len(Path(ledger).read_text().splitlines())
    if runs <= failures:
        raise Transient(f"run {runs} failed")
    return {"runs": runs}


class SpinParams(Schema):
    ledger = fields.String(required=True)


@job("test.spin", params=SpinParams, ttl=600, poll_interval=0.1)
def spin(ctx: JobContext, ledger: str) -> dict[str, Any]:
    """Runs until cancelled, checking often; records that it started (and with which pid)."""
    _append(ledger, {"event": "start", "pid": os.getpid()})
    while True:
        ctx.check_cancelled()
        time.sleep(0.01)


@job("test.stubborn", params=SpinParams, ttl=600, poll_interval=0.1)
def stubborn(ctx: JobContext, ledger: str) -> dict[str, Any]:
    """Runs for ever without a cancellation point (a computation that never looks up); records that it started."""
    _append(ledger, {"event": "start", "pid": os.getpid()})
    while True:
        time.sleep(0.05)


class AskTwiceParams(Schema):
    ledger = fields.String(required=True)


@job("test.ask_twice", params=AskTwiceParams, ttl=600, poll_interval=0.1)
def ask_twice(ctx: JobContext, ledger: str) -> dict[str, Any]:
    """Two questions in a row, with a recorded step between them."""
    first = ctx.ask("first", "First?", {"type": "object", "properties": {"v": {"type": "integer"}},
                                        "required": ["v"]})
    mid = ctx.step("between", lambda: _append(ledger, {"event": "effect"}) or "done")
    second = ctx.ask("second", "Second?", {"type": "object", "properties": {"v": {"type": "integer"}}})
    return {"first": first, "mid": mid, "second": second}


@job("test.ask_pair", params=NoParams, ttl=600, poll_interval=0.1)
def ask_pair(ctx: JobContext) -> dict[str, Any]:
    """Two questions at once: the job resumes only when both are answered."""
    return ctx.ask_all({"name": ("Name?", {"type": "object", "properties": {"name": {"type": "string"}},
                                           "required": ["name"]}),
                        "size": ("Size?", {"type": "object", "properties": {"size": {"type": "integer"}}})})


class CrashParams(Schema):
    ledger = fields.String(required=True)


@job("test.crash", params=CrashParams, ttl=600, poll_interval=0.1)
def crash(ctx: JobContext, ledger: str) -> None:
    """Kills the process running it, every time: a poison job."""
    _append(ledger, {"event": "start", "pid": os.getpid()})
    os.kill(os.getpid(), 9)


@job("test.crash_worker", params=CrashParams, ttl=600, poll_interval=0.1)
def crash_worker(ctx: JobContext, ledger: str) -> None:
    """Kills the whole worker it runs in (the process group the tests start it in), every time: the
    broker gets its message back with the connection, unacknowledged."""
    _append(ledger, {"event": "start", "pid": os.getpid()})
    os.killpg(os.getpgrp(), 9)


#: Every kind of question the web page turns into a form field.
SHIPPING_FORM = {
    "type": "object",
    "properties": {
        "speed": {"type": "string", "title": "Delivery speed", "enum": ["standard", "express"],
                  "enumNames": ["Standard (3-5 days)", "Express (next day)"]},
        "boxes": {"type": "integer", "title": "Boxes", "minimum": 1, "maximum": 20,
                  "description": "How many boxes to ship"},
        "weight": {"type": "number", "title": "Weight (kg)", "minimum": 0.1},
        "email": {"type": "string", "title": "Email for tracking", "format": "email", "maxLength": 120},
        "gift": {"type": "boolean", "title": "Gift wrap", "default": False},
    },
    "required": ["speed", "boxes"],
}


@job("test.form", params=NoParams, ttl=600, poll_interval=0.1)
def form(ctx: JobContext) -> dict[str, Any]:
    """Asks one question of every kind the web page renders; returns the answer."""
    answer: dict[str, Any] = ctx.ask("shipping", "How should the order ship?", SHIPPING_FORM)
    return answer


class WaitThenParams(Schema):
    ledger = fields.String(required=True)
    gate = fields.String(required=True)
    then = fields.String(required=True)


@job("test.wait_then", params=WaitThenParams, ttl=600, poll_interval=0.1)
def wait_then(ctx: JobContext, ledger: str, gate: str, then: str) -> Any:
    """Starts, waits for `gate` without a cancellation point, then does `then` (ask | step | progress | return)."""
    _append(ledger, {"event": "start", "pid": os.getpid()})
    while not Path(gate).exists():
        time.sleep(0.01)
    if then == "ask":
        return ctx.ask("late", "Still there?", {"type": "object", "properties": {"ok": {"type": "boolean"}}})
    if then == "step":
        return ctx.step("late", lambda: _append(ledger, {"event": "effect"}) or "done")
    if then == "progress":
        ctx.progress(1, 2, "halfway")
    return {"late": True}


class NoteForm(Schema):
    """A question with nullable fields, as marshmallow publishes them: `"type": ["string", "null"]`."""

    note = fields.String(allow_none=True, metadata={"description": "Anything to add (optional)"})
    copies = fields.Integer(required=True, allow_none=True, metadata={"description": "How many, if any"})


@job("test.ask_nullable", params=NoParams, ttl=600, poll_interval=0.1)
def ask_nullable(ctx: JobContext) -> dict[str, Any]:
    """Asks a question whose fields may be null; returns the answer."""
    answer: dict[str, Any] = ctx.ask("note", "Anything to add?", NoteForm)
    return answer


class SleeperParams(Schema):
    seconds = fields.Float(required=True)
    ledger = fields.String(load_default=None, allow_none=True)
    ask = fields.Boolean(load_default=False)
    until = fields.String(load_default=None, allow_none=True)


@job("test.sleeper", params=SleeperParams, ttl=600, poll_interval=0.1)
def sleeper(ctx: JobContext, seconds: float, ledger: str | None, ask: bool, until: str | None) -> dict[str, Any]:
    """Sleeps `seconds` (parking from 5 s on), or until the ISO time `until`; then, with `ask`, asks a question.
    Every run notes its start."""
    if ledger:
        _append(ledger, {"event": "start", "pid": os.getpid()})
    if until:
        ctx.sleep_until(datetime.fromisoformat(until))
    else:
        ctx.sleep(seconds)
    if ledger:
        _append(ledger, {"event": "woke"})
    answer = ctx.ask("go", "Go on?") if ask else None
    return {"slept": seconds, "answer": answer}


class ChildParams(Schema):
    ledger = fields.String(required=True)
    index = fields.Integer(required=True)
    gate = fields.String(load_default=None, allow_none=True)
    fail = fields.Boolean(load_default=False)
    mend = fields.String(load_default=None, allow_none=True)


@job("test.child", params=ChildParams, ttl=600, poll_interval=0.1)
def child(ctx: JobContext, ledger: str, index: int, gate: str | None, fail: bool, mend: str | None) -> dict[str, Any]:
    """Waits for `gate` (if given), then records its one effect; fails after it with `fail`, unless the file
    `mend` exists by then."""
    _append(ledger, {"event": "child start", "index": index, "pid": os.getpid()})
    while gate and not Path(gate).exists():
        ctx.sleep(0.02)
    ctx.step("effect", lambda: _append(ledger, {"event": "child", "index": index, "id": ctx.job_id}) or index)
    if fail and not (mend and Path(mend).exists()):
        raise ValueError(f"child {index} failed")
    return {"child": index}


class ParentParams(Schema):
    ledger = fields.String(required=True)
    children = fields.Integer(load_default=3)
    gate = fields.String(load_default=None, allow_none=True)
    fail = fields.Integer(load_default=None, allow_none=True)
    catch = fields.Boolean(load_default=False)
    mend = fields.String(load_default=None, allow_none=True)
    hold = fields.String(load_default=None, allow_none=True)
    quit = fields.Boolean(load_default=False)


@job("test.parent", params=ParentParams, ttl=600, poll_interval=0.1)
def parent(ctx: JobContext, ledger: str, children: int, gate: str | None, fail: int | None,
           catch: bool, mend: str | None, hold: str | None, quit: bool) -> Any:
    """Waits for the file `hold` (if given), spawns `children` test.child jobs (child `fail` fails, unless the file
    `mend` exists when it runs) and waits for them; with `catch`, returns what `ChildFailed` says instead of
    failing. With `quit` it fails itself right after the spawns, before waiting, unless `mend` exists."""
    _append(ledger, {"event": "start", "pid": os.getpid()})
    while hold and not Path(hold).exists():
        ctx.sleep(0.02)
    ids = [ctx.spawn("test.child", {"ledger": ledger, "index": i, "gate": gate, "fail": i == fail, "mend": mend})
           for i in range(children)]
    if quit and not (mend and Path(mend).exists()):
        raise ValueError("the parent quit")
    try:
        return {"children": ids, "results": ctx.wait_for(ids)}
    except ChildFailed as exc:
        if not catch:
            raise
        return {"failed": exc.child_id, "state": exc.state, "error": exc.error}


class MarkParams(Schema):
    ledger = fields.String(required=True)
    tag = fields.String(load_default="")
    customer_id = fields.String(load_default="")
    hold = fields.String(load_default=None, allow_none=True)
    seconds = fields.Float(load_default=0.0)


def _marked(ctx: JobContext, ledger: str, tag: str, hold: str | None, seconds: float) -> dict[str, Any]:
    _append(ledger, {"event": "start", "tag": tag, "t": time.time()})
    end = time.monotonic() + seconds
    while (hold and not Path(hold).exists()) or time.monotonic() < end:
        ctx.sleep(0.005)
    _append(ledger, {"event": "end", "tag": tag, "t": time.time()})
    return {"tag": tag}


@job("test.mark", params=MarkParams, ttl=600, poll_interval=0.1)
def mark(ctx: JobContext, ledger: str, tag: str, customer_id: str, hold: str | None,
         seconds: float) -> dict[str, Any]:
    """Writes when it starts and ends; runs `seconds`, and until the file `hold` exists."""
    return _marked(ctx, ledger, tag, hold, seconds)


@job("test.limited", params=MarkParams, ttl=600, poll_interval=0.1,
     concurrency=Concurrency(max=2, key="customer_id"))
def limited(ctx: JobContext, ledger: str, tag: str, customer_id: str, hold: str | None,
            seconds: float) -> dict[str, Any]:
    """`test.mark`, at most two at once per customer."""
    return _marked(ctx, ledger, tag, hold, seconds)


@job("test.limited_uncancellable", params=MarkParams, ttl=600, poll_interval=0.1,
     concurrency=Concurrency(max=1, key="customer_id"))
def limited_uncancellable(ctx: JobContext, ledger: str, tag: str, customer_id: str, hold: str | None,
                          seconds: float) -> dict[str, Any]:
    """One at a time per customer, in a call with no cancellation point (a card charge, say) that lasts until the
    file `hold` exists."""
    _append(ledger, {"event": "start", "tag": tag, "t": time.time()})
    while hold and not Path(hold).exists():
        time.sleep(0.005)
    _append(ledger, {"event": "end", "tag": tag, "t": time.time()})
    ctx.check_cancelled()
    return {"tag": tag}


class RoutedParams(Schema):
    to = fields.List(fields.String(), load_default=list)
    deadline_s = fields.Float(load_default=None, allow_none=True)
    on_timeout = fields.Raw(load_default="fail", allow_none=True)


APPROVAL_FORM = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}


@job("test.ask_routed", params=RoutedParams, ttl=600, poll_interval=0.1)
def ask_routed(ctx: JobContext, to: list[str], deadline_s: float | None, on_timeout: Any) -> dict[str, Any]:
    """Asks `approve` of the principals and roles in `to`, with a deadline of `deadline_s` seconds if given."""
    deadline = timedelta(seconds=deadline_s) if deadline_s is not None else None
    answer = ctx.ask("approve", "Approve the refund?", APPROVAL_FORM, to=to, deadline=deadline, on_timeout=on_timeout)
    return {"approval": answer}


class AskThenStepParams(Schema):
    ledger = fields.String(required=True)
    deadline_s = fields.Float(required=True)
    on_timeout = fields.Raw(required=True, allow_none=True)


@job("test.ask_then_step", params=AskThenStepParams, ttl=600, poll_interval=0.1)
def ask_then_step(ctx: JobContext, ledger: str, deadline_s: float, on_timeout: Any) -> dict[str, Any]:
    """Asks bob `approve` with a deadline, then records one effect as a step: what a deadline's answer leads to.
    Every run notes its start."""
    _append(ledger, {"event": "start", "pid": os.getpid()})
    answer = ctx.ask("approve", "Approve the refund?", APPROVAL_FORM, to=["principal:bob"],
                     deadline=timedelta(seconds=deadline_s), on_timeout=on_timeout)
    ctx.step("after", lambda: _append(ledger, {"event": "effect", "answer": answer}) or True)
    return {"approval": answer}


class FailsAtThirdParams(Schema):
    ledger = fields.String(required=True)
    switch = fields.String(required=True)
    gate = fields.String(required=True)


@job("test.fails_at_third", params=FailsAtThirdParams, ttl=600, poll_interval=0.1)
def fails_at_third(ctx: JobContext, ledger: str, switch: str, gate: str) -> dict[str, Any]:
    """Three recorded steps, each with one effect; the third fails unless the file `switch` exists, and otherwise
    waits (without a cancellation point) for the file `gate` before its effect. Each start of the third step is
    noted with the pid running it."""
    def third() -> int:
        _append(ledger, {"event": "third", "pid": os.getpid(), "job": ctx.job_id})
        if not Path(switch).exists():
            raise RuntimeError("the third step fails until switched")
        while not Path(gate).exists():
            time.sleep(0.01)
        _append(ledger, {"event": "effect", "step": 2, "job": ctx.job_id})
        return 2

    for i in range(2):
        ctx.step(f"s{i}", lambda i=i: _append(ledger, {"event": "effect", "step": i, "job": ctx.job_id}) or i)
    ctx.step("s2", third)
    return {"steps": 3}
