"""Every Redis key the product writes is built here, from one prefix.

Per-job keys share the hash tag `{<id>}` so that one job lives in one Redis Cluster slot; an owner's
index and idempotency records share the tag `{o:<owner digest>}`. Scripts never mix the two groups.
Every key gets a TTL: per-job keys expire at the job's `createdAt + ttlMs`; indexes at the TTL ceiling.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass


def _digest(value: str, size: int = 16) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[: size * 2]


@functools.lru_cache(maxsize=4096)
def _owner_digest(owner: str) -> str:
    """An owner's tag digest, kept for the owners seen lately: every submit and admission names one or two owner
    keys, and the same few owners make most requests."""
    return _digest(owner, 12)


class _JobKey:
    """`keys.NAME(job_id)`: a key of one job, under the job's hash tag."""

    def __init__(self, part: str) -> None:
        self.part = part

    def __get__(self, keys: Keys, _: type | None = None) -> Callable[[str], str]:
        return lambda job_id: f"{keys.prefix}:{{{job_id}}}:{self.part}"


class _OwnerKey:
    """`keys.NAME(owner)`: a key of one owner, under the owner's hash tag."""

    def __init__(self, part: str) -> None:
        self.part = part

    def __get__(self, keys: Keys, _: type | None = None) -> Callable[[str], str]:
        return lambda owner: f"{keys.owner_tag(owner)}:{self.part}"


class _SystemKey:
    """`keys.NAME()`: one key for the whole system."""

    def __init__(self, part: str) -> None:
        self.part = part

    def __get__(self, keys: Keys, _: type | None = None) -> Callable[[], str]:
        return lambda: f"{keys.prefix}:{self.part}"


#: The dispatch gate's keys, in the order its scripts take them (see `Keys.gate`).
GATE_PARTS = ("jobs", "ring", "turns", "flight", "delayed", "workers", "slots", "ready", "conc")


@dataclass(frozen=True)
class Keys:
    prefix: str

    # -- one job (each expires with the job) ---------------------------------------------------------
    job = _JobKey("job")  #: the job record (hash; its fields: `store.fields`)
    events = _JobKey("events")  #: the job's changes (stream), what event streams and push read
    steps = _JobKey("steps")  #: recorded step results (hash: step name -> JSON)
    answers = _JobKey("answers")  #: answers to the job's questions (hash: key -> JSON)
    #: push subscriptions (hash: subscription id -> JSON, in the shape of the adapter that made it)
    push_configs = _JobKey("push")
    #: per subscription, the last event delivered and the retry state (hash: subscription id -> JSON)
    push_cursors = _JobKey("pushpos")
    #: held by the one worker delivering the job's notifications (a random token, short TTL)
    push_lock = _JobKey("pushlock")
    #: opaque strings adapters keep beside the job (hash: adapter-prefixed name -> value; `job_meta`)
    job_meta = _JobKey("meta")
    #: the job's children, made by its `ctx.spawn` (sorted set: child id -> Redis ms of the spawn)
    children = _JobKey("kids")
    #: the remote tasks the job created and has not seen end (hash: step name -> reference JSON; `store.remotes`)
    remote_tasks = _JobKey("remote")
    #: the audit entries about the job (stream; `store.audit`): kept for the audit retention after the last
    audit_job = _JobKey("audit")

    def job_keys(self, job_id: str) -> list[str]:
        """All keys of one job, in the order the Lua scripts expect them."""
        return [self.job(job_id), self.events(job_id), self.steps(job_id), self.answers(job_id)]

    def lifetime_keys(self, job_id: str) -> list[str]:
        """Every key of one job that ends when the job does, its hash first: not the push lock, whose TTL is a
        lease's, nor the audit entries, which outlive the job."""
        return [*self.job_keys(job_id), self.push_configs(job_id), self.push_cursors(job_id), self.job_meta(job_id),
                self.children(job_id), self.remote_tasks(job_id)]

    # -- one owner (each expires at the TTL ceiling) ------------------------------------------------
    def owner_tag(self, owner: str) -> str:
        return f"{self.prefix}:{{o:{_owner_digest(owner)}}}"

    owner_index = _OwnerKey("jobs")  #: the owner's jobs (sorted set: job id -> creation, ms)

    def owner_index_pattern(self) -> str:
        """A SCAN pattern matching every owner's index (operators' listings across owners)."""
        return f"{self.prefix}:{{o:*}}:jobs"
    rate = _OwnerKey("rate")  #: request-rate state (hash: theoretical arrival time, last request's answer)
    active_jobs = _OwnerKey("active")  #: jobs that were unfinished at the last prune of the active count (set)
    #: the owner-index score up to which the last prune read (jobs indexed after it count as unfinished)
    active_mark = _OwnerKey("activemark")
    streams = _OwnerKey("streams")  #: open streams (sorted set: stream id -> lease expiry, ms)
    #: the owner's schedules (sorted set: schedule name -> creation, ms); expires with the last of them
    schedules = _OwnerKey("scheds")
    #: the owner's webhook signing secret (hash: `current`, and `previous` with `previousUntil` during a
    #: rotation's grace period; `push.secrets`); renewed at least a TTL ceiling ahead by each submit that uses it
    webhook_secret = _OwnerKey("whsec")
    #: the audit entries about the owner's jobs and schedules (stream; `store.audit`), kept as `audit_job`
    audit_owner = _OwnerKey("audit")

    def schedule(self, owner: str, name: str) -> str:
        """One schedule (hash; its fields: `store.schedules`), under its owner's tag; expires a TTL ceiling
        after its next run (every tick pushes that on)."""
        return f"{self.owner_tag(owner)}:sched:{_digest(name)}"

    def schedule_jobs(self, owner: str, name: str) -> str:
        """The jobs a schedule made (sorted set: job id -> tick time, ms), for `GET /v1/jobs?schedule=`;
        expires with the schedule."""
        return f"{self.owner_tag(owner)}:schedjobs:{_digest(name)}"

    def schedule_deleted(self, owner: str, name: str) -> str:
        """The request id that deleted a schedule (a string), which a replay of that delete answers; short TTL."""
        return f"{self.owner_tag(owner)}:scheddel:{_digest(name)}"

    #: the owner's schedules declared in code (set: name), which do not count against `max_schedules`;
    #: expires with the owner's schedules
    schedules_declared = _OwnerKey("schedsdecl")

    def idempotency(self, owner: str, key: str) -> str:
        return f"{self.owner_tag(owner)}:idem:{_digest(key)}"

    def auth_failures(self, address: str) -> str:
        """Failed authentications from one client address in the current window (hash). Read by the per-request
        limits in the same round trip as the owner-tagged limit keys, but by a script of its own (pipelined),
        since the address and the owner hash to different Redis Cluster slots."""
        return f"{self.prefix}:{{a:{_digest(address, 12)}}}:authfail"

    # -- questions (each expires at the TTL ceiling, renewed by every write) --------------------------------
    def questions_for(self, addressee: str) -> str:
        """The jobs that asked `addressee` ("principal:NAME" or "role:NAME") a question (sorted set: job id ->
        Redis ms of the ask); read through the job, so an entry outlives its question harmlessly."""
        return f"{self.prefix}:{{q:{_digest(addressee, 12)}}}:asked"

    def answer_link(self, digest: str) -> str:
        """A one-time answer link (hash: `job`, `key`, `id`, `until`, `used`), by the digest of its token; expires
        with the link."""
        return f"{self.prefix}:{{l:{digest[:24]}}}:link"

    def answer_link_of(self, job_id: str, key: str) -> str:
        """The digest of the live answer link of one question (a string), under the job's tag; expires with it."""
        return f"{self.prefix}:{{{job_id}}}:link:{_digest(key)}"

    # -- the whole system ---------------------------------------------------------------------------
    sweep = _SystemKey("sweep")  #: jobs the sweeper must look at, scored by when (ms)
    #: waiting jobs to look at again (`running.waking`): a sleeper at its time, a parent now and then (ms)
    wake = _SystemKey("wake")
    #: jobs waiting on other agents' tasks (`remote.polling`), scored by when to look at the remote next (Redis ms);
    #: renewed at the TTL ceiling on every write
    remote_due = _SystemKey("remote:due")
    #: the key that signs the tokens remote agents send with their push notifications (`remote.push`); renewed to
    #: the TTL ceiling whenever a token is made, so it outlives every job that may still be sent one
    remote_push_key = _SystemKey("remote:pushkey")
    #: jobs with push subscriptions whose feed a worker must look at, scored by when (ms)
    push_due = _SystemKey("push:due")
    #: schedules the ticker must look at (sorted set: "<name> LF <owner>" -> next run, Redis ms); renewed at
    #: the TTL ceiling on every write
    schedules_due = _SystemKey("sched:due")

    def schedules_taken(self) -> str:
        """The due entries a ticker took (hash: member -> "<first taken ms> <lease end ms>"), so that a schedule
        whose taker died is judged from when it was first taken; in the due set's slot (its whole name is the tag),
        renewed with it."""
        return f"{self.prefix}:{{{self.schedules_due()}}}:taken"

    def schedules_take_reply(self, request_id: str) -> str:
        """The reply of one take of the due set (a string), which its replay answers; in the due set's slot,
        expiring with the lease it gave."""
        return f"{self.prefix}:{{{self.schedules_due()}}}:take:{request_id}"
    #: the operations the workers run, as they last published them (hash: name -> publish time and entry; see
    #: `catalog`): what an application that submits without the job code checks params against
    operations = _SystemKey("operations")
    #: every audit entry (stream; `store.audit`): trimmed to the audit retention and a length cap at each write,
    #: and expiring the retention after the last
    audit = _SystemKey("audit")

    # -- the dispatch gate, one per broker queue (one hash tag: one Redis Cluster slot; `store.admission`) ---
    def gate(self, queue: str, part: str) -> str:
        """A key of the dispatch gate of the broker queue `queue` (`scripts/lib/gate.lua`), one tag for all:
        `jobs` (hash: job id -> what the gate knows of it), `ring` (sorted set: owners with held jobs -> their
        turn), `turns` (hash: counters), `flight` (sorted set: jobs whose message went to the broker -> when),
        `delayed` (sorted set: job id -> when due), `workers` (sorted set: worker -> until when its slots count),
        `slots` (hash: worker -> slots), `ready` (sorted set of held jobs, by owner, priority, sequence), `conc`
        (hash: concurrency value -> jobs in flight). Each expires at the TTL ceiling, renewed by every write."""
        return f"{self.prefix}:{{gate:{queue}}}:{part}"

    def gate_keys(self, queue: str) -> list[str]:
        """The gate's keys, in the order its scripts expect them."""
        return [self.gate(queue, p) for p in GATE_PARTS]

    def gate_owner(self, owner: str) -> str:
        """An owner's name in the gate."""
        return _digest(owner, 12)

    def gate_concurrency(self, operation: str, value: str) -> str:
        """A concurrency value's name in the gate."""
        return _digest(f"{operation}\0{value}", 12)

    def queue_pushes(self, queue: str) -> str:
        """How many job messages were ever pushed to the broker list `queue` (a counter, in the broker's
        Redis, next to the list; see `RedisDispatcher`)."""
        return f"{self.prefix}:pushes:{queue}"

    @staticmethod
    def bypass_queue(queue: str) -> str:
        """The broker list a lone owner's jobs skip the dispatch gate to (`scripts/lib/gate.lua`, the bypass): the
        name Celery's Redis transport gives `queue`'s priority-9 messages, so that workers read it when `queue`'s
        own list is empty. A broker list, like `queue`: kombu's, with no TTL."""
        return f"{queue}\x06\x169"

    def lock(self, name: str) -> str:
        return f"{self.prefix}:lock:{name}"

    def stats(self, name: str) -> str:
        """Job metrics that workers and sweepers write and every web process reports."""
        return f"{self.prefix}:stats:{name}"

    def pattern(self) -> str:
        return f"{self.prefix}:*"
