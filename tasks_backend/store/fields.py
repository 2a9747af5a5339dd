"""Every field of a job hash: its name in Redis, what it means, and who writes it.

Rule: Python names a job-hash field only here (the Lua scripts under `scripts/` name them in Redis). A name
never changes: a running job's hash outlives an upgrade.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model.domain import DEFAULT_PRIORITY, JobRecord, JobState


@dataclass(frozen=True)
class Field:
    name: str
    meaning: str
    #: The scripts (under `scripts/`) or store operations that write it.
    writer: str


#: Every field a job hash may hold.
FIELDS: tuple[Field, ...] = (
    Field("owner", "the principal that submitted the job", "submit, create"),
    Field("op", "the operation's name", "submit, create"),
    Field("state", "the job's state (a `JobState` value)", "every script that changes a job"),
    Field("created", "createdAt, Redis ms", "submit, create"),
    Field("updated", "the time of the last change, Redis ms", "every script that changes a job"),
    Field("ttl", "how long the job and its keys live, ms from `created`", "submit, create; adopt lengthens it"),
    Field("poll", "the poll interval offered to clients, ms", "submit, create"),
    Field("params", "the job's parameters, canonical JSON", "submit, create"),
    Field("idem", "the idempotency key it was submitted with", "submit, create"),
    Field("msg", "the status message", "progress, transition, cancel, input, sweep_one; claim drops it"),
    Field("done", "progress so far", "progress, transition"),
    Field("total", "the progress total", "progress, transition"),
    Field("result", "the job's result, JSON", "transition (completed)"),
    Field("error", "the job's error, JSON", "transition (failed), claim (exhausted), sweep_one (abandoned)"),
    Field("inreq", "the open input requests, JSON", "transition (input_required), input; cancel drops it"),
    Field("attempts", "runs started since the last park, retry or hand-back", "claim, transition"),
    Field("retries", "retries made after a retryable error", "transition (queued for a retry)"),
    Field("token", "the fencing token of the current run", "claim, cancel"),
    Field("lease", "until when the current run holds the job, Redis ms", "claim, renew; dropped on every move"),
    Field("worker", "the worker holding the current run", "claim; dropped on every move"),
    Field("rq", "the last request id that changed the job and its reply ('<id> <reply>'): a replay answers it",
          "create, transition, claim, cancel, input, sweep_one"),
    Field("ctok", "the token of a run the owner cancelled (that run sees `cancelled`, not `lost`)", "cancel"),
    Field("ckpt", "'1' once the job recorded a step or an answer (there is something to delete at the end)",
          "step, input"),
    Field("lstep", "the name of the step the job recorded last (a rerun keeping steps reads it)", "step"),
    Field("mark", "the queue's push count when the sweeper first looked at the queued job",
          "sweep_one; claim drops it"),
    Field("gone", "since when the job's message has left the queue, Redis ms", "sweep_one; claim drops it"),
    Field("bmark", "as `mark`, for a job sent past the dispatch gate: the bypass list's push count",
          "sweep_one; claim drops it"),
    Field("bgone", "as `gone`, for a job sent past the dispatch gate: since when it left the bypass list",
          "sweep_one; claim drops it"),
    Field("runat", "the time the job may start, Redis ms (a submit's runAt)", "submit, create"),
    Field("delay", "ms after `created` the job may start (a submit's delayMs)", "submit, create"),
    Field("prio", "the job's priority, 0-9 (absent: 5)", "submit, create"),
    Field("repub", "republishes so far, for the backoff of brokers that give no counts", "sweep_one"),
    Field("sched", "the name of the schedule whose tick made the job", "schedules.mark_job"),
    Field("parent", "the job whose `ctx.spawn` made this one, or the rerun that took it over",
          "submit, create, adopt"),
    Field("rerun", "the failed or cancelled job this one reruns", "submit, create"),
    Field("wake", "until when a sleeping job waits (Redis ms)", "transition (suspended); wake drops it"),
    Field("kids", "the child jobs a waiting job waits for, JSON ids", "transition (suspended); wake drops it"),
    Field("ansby", "who answered each question: JSON key -> {by, at (Redis ms), from (address)}", "input"),
    Field("trace", "the submit's trace context, a W3C traceparent (absent: not traced)", "submit, create"),
)

#: Field names by name, to look one up.
BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}

OWNER, STATE, TOKEN, CANCELLED_TOKEN, LEASE, WORKER = "owner", "state", "token", "ctok", "lease", "worker"
OPERATION = "op"
PARENT = "parent"
#: The name of the step the job recorded last (`step.lua`).
LAST_STEP = "lstep"
#: What a claim drops of the hash it read: the last run's message and the sweeper's marks of the last queueing.
CLAIM_DROPS = ("msg", "mark", "gone", "bmark", "bgone")


def created_record(job_id: str, new: Mapping[str, str], created_ms: int) -> JobRecord:
    """The record of a job just written from `new` (see `new_job`), created at `created_ms`."""
    return record(job_id, {**new, "created": str(created_ms), "updated": str(created_ms)})


def new_job(*, owner: str, operation: str, ttl_ms: int, poll_ms: int, params_json: str,
            idempotency_key: str | None, parent_id: str | None = None, run_at_ms: int | None = None,
            delay_ms: int | None = None, priority: int | None = None, trace: str | None = None,
            rerun_of: str | None = None, checkpointed: bool = False) -> dict[str, str]:
    """The fields a submit writes (state first: the scripts read it from the first pair). `created` and
    `updated` are Redis's time, set by the script."""
    fields = {STATE: JobState.QUEUED.value, OWNER: owner, OPERATION: operation, "ttl": str(ttl_ms),
              "poll": str(poll_ms), "params": params_json}
    if idempotency_key is not None:
        fields["idem"] = idempotency_key
    if parent_id is not None:
        fields[PARENT] = parent_id
    if rerun_of is not None:
        fields["rerun"] = rerun_of
    if checkpointed:  # steps copied from the job it reruns: deleted with the job's other checkpoints at its end
        fields["ckpt"] = "1"
    if run_at_ms is not None:
        fields["runat"] = str(run_at_ms)
    if delay_ms:
        fields["delay"] = str(delay_ms)
    if priority is not None and priority != DEFAULT_PRIORITY:
        fields["prio"] = str(priority)
    if trace:
        fields["trace"] = trace
    return fields


def record(job_id: str, raw: Mapping[str, str], queued_ms: int = 0) -> JobRecord:
    """The record a job hash holds (`queued_ms`: a claim's, see `JobRecord.queued_ms`)."""

    def num(name: str) -> float | None:
        value = raw.get(name)
        return float(value) if value not in (None, "") else None

    def js(name: str) -> Any:
        value = raw.get(name)
        return json.loads(value) if value else None

    run_at = raw.get("runat")
    delay = raw.get("delay")
    return JobRecord(
        id=job_id,
        owner=raw[OWNER],
        operation=raw[OPERATION],
        state=JobState(raw[STATE]),
        created_ms=int(raw["created"]),
        updated_ms=int(raw["updated"]),
        ttl_ms=int(raw["ttl"]),
        poll_ms=int(raw["poll"]),
        params_json=raw.get("params") or "{}",
        status_message=raw.get("msg") or None,
        progress=num("done"),
        total=num("total"),
        result=js("result"),
        error=js("error"),
        input_requests=js("inreq"),
        attempts=int(raw.get("attempts") or 0),
        retries=int(raw.get("retries") or 0),
        token=int(raw.get(TOKEN) or 0),
        lease_until_ms=int(raw.get(LEASE) or 0),
        idempotency_key=raw.get("idem") or None,
        schedule=raw.get("sched") or None,
        parent_id=raw.get(PARENT) or None,
        rerun_of=raw.get("rerun") or None,
        run_at_ms=int(run_at) if run_at else (int(raw["created"]) + int(delay) if delay else None),
        priority=int(raw.get("prio") or DEFAULT_PRIORITY),
        trace=raw.get("trace") or None,
        queued_ms=queued_ms,
        answered_by=js("ansby"),
    )


@dataclass(frozen=True)
class Change:
    """What a move of a job writes besides its state (None: leaves the field as it is). A run that ends, parks
    or goes back to the queue gives up its lease and worker (`release`)."""

    message: str | None = None
    result_json: str | None = None
    error_json: str | None = None
    input_requests_json: str | None = None
    attempts: int | None = None
    retries: int | None = None
    #: Waiting: until when (Redis ms), or for which child jobs (JSON ids).
    wake_ms: int | None = None
    children_json: str | None = None
    release: bool = False

    @classmethod
    def completed(cls, result_json: str) -> Change:
        return cls(result_json=result_json, release=True)

    @classmethod
    def failed(cls, error_json: str, message: str) -> Change:
        return cls(error_json=error_json, message=message, release=True)

    @classmethod
    def parked(cls, input_requests_json: str, message: str) -> Change:
        """Waiting for input: the run ends, and the next one starts counting attempts afresh."""
        return cls(input_requests_json=input_requests_json, message=message, attempts=0, release=True)

    @classmethod
    def waiting(cls, message: str, *, wake_ms: int | None = None, children_json: str | None = None) -> Change:
        """Waiting for a time or for child jobs: the run ends, and the next one starts counting attempts afresh."""
        return cls(message=message, wake_ms=wake_ms, children_json=children_json, attempts=0, release=True)

    @classmethod
    def retrying(cls, retries: int, message: str) -> Change:
        return cls(retries=retries, attempts=0, message=message, release=True)

    @classmethod
    def handed_back(cls, attempts: int, message: str) -> Change:
        return cls(attempts=attempts, message=message, release=True)

    def pairs(self) -> list[str]:
        """The name/value pairs the transition script writes ('' deletes a field)."""
        fields = {"msg": self.message, "result": self.result_json, "error": self.error_json,
                  "inreq": self.input_requests_json,
                  "attempts": None if self.attempts is None else str(self.attempts),
                  "retries": None if self.retries is None else str(self.retries),
                  "wake": None if self.wake_ms is None else str(self.wake_ms), "kids": self.children_json}
        if self.release:
            fields.update({LEASE: "", WORKER: ""})
        return [x for name, value in fields.items() if value is not None for x in (name, value)]
