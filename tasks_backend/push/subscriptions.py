"""Push subscriptions in Redis: webhooks that receive each change of a job, in order, at least once.

A subscription is an adapter's own JSON object with an `id` (unique within the job) and a `url`, stored as
given with the name of its `PushFormat` (what that protocol's subscribers receive), and a delivery cursor.
The workers' delivery loop POSTs to its `url`; the target guard and the POST itself are in `webhook`.
Rule: jobs without subscriptions cost nothing (only a job that has one is put on the `push_due` set, which only
the delivery loop reads), and every key written here expires with its job (`createdAt + ttlMs`); the due set
is an index kept at the TTL ceiling like the sweeper's.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import InvalidParams
from ..model.domain import JobRecord
from ..store.connect import redis_errors
from ..store.feeds import Event, event
from ..store.jobs import RedisStore
from ..store.outcomes import Locked, Saved
from .targets import TargetRefused as TargetRefused
from .targets import resolve_target as resolve_target
from .webhook import post_event as post_event

#: Subscriptions one job may hold; each one is a webhook POST per event.
MAX_CONFIGS_PER_JOB = 10
#: Told of each subscription set or deleted: `(principal, action, job_id=, target=, owner=)`, as the audit
#: trail's `Audit.record` takes them (only a job's owner changes its subscriptions).
AuditHook = Callable[..., None]

class PushFormat(Protocol):
    """What an adapter's subscribers receive: the adapter that stores a subscription names its format."""

    def bodies(self, record: JobRecord, meta: Mapping[str, str]) -> list[dict[str, Any]]:
        """The JSON bodies to POST for the job as `record` shows it (`meta`: the job's `JobMeta`)."""
        ...

    def headers(self, subscription: Mapping[str, Any]) -> dict[str, str]:
        """Headers of each POST to this subscriber (its credentials, in the protocol's way)."""
        ...


@runtime_checkable
class SignedPushFormat(PushFormat, Protocol):
    """A format that makes each POST whole (its exact body bytes and its headers), for a protocol that signs
    them or chooses per subscription what to send; the delivery loop then calls `posts` instead of
    `bodies` and `headers`."""

    def posts(self, subscription: Mapping[str, Any], record: JobRecord, meta: Mapping[str, str], *,
              message_id: str, store: RedisStore) -> list[tuple[bytes, dict[str, str]]]:
        """(body, headers) of each POST for the job as `record` shows it. `message_id` is the same for every
        attempt at this change (so a receiver can drop one it already had), and `store` reads what the
        format keeps in Redis (a signing secret)."""
        ...


def _decode(raw: str) -> tuple[str, dict[str, Any]]:
    """(format name, subscription) of a stored value; "" for one stored without a format name."""
    value = json.loads(raw)
    if isinstance(value, dict) and set(value) == {"format", "subscription"}:
        return str(value["format"]), dict(value["subscription"])
    return "", value if isinstance(value, dict) else {}
#: Feed entries read per job and pass; a longer backlog is read on the next pass, at once.
FEED_BATCH = 100


@dataclass(frozen=True)
class Cursor:
    """Where delivery to one config stands: the last event sent, and the retry state of the next.

    `done`: the job's final state was delivered to this config or given up on; nothing is left.
    `tag` is new with every `put`, so a config replaced during a delivery pass is not overwritten by
    the cursor that pass computed for the config it replaced.
    """

    after: str = "0-0"
    attempts: int = 0
    retry_at_ms: int = 0
    done: bool = False
    tag: str = ""

    def to_json(self) -> str:
        return json.dumps({"after": self.after, "attempts": self.attempts, "retryAt": self.retry_at_ms,
                           "done": self.done, "tag": self.tag})

    @classmethod
    def from_json(cls, raw: str) -> Cursor:
        data = json.loads(raw)
        return cls(str(data.get("after", "0-0")), int(data.get("attempts", 0)), int(data.get("retryAt", 0)),
                   bool(data.get("done", False)), str(data.get("tag", "")))


def event_key(event_id: str) -> tuple[int, int]:
    """A stream entry id as a number pair, for ordering (`0-0` is before everything)."""
    ms, _, seq = event_id.partition("-")
    return int(ms), int(seq or 0)


# -- Redis -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pending:
    """What one delivery pass read of a job, in one snapshot: the feed after the oldest cursor that is
    `ready` (not done, no retry waiting), then the record (so the record is at least as new as every
    event read) and the raw cursors (to save them only if nobody changed them meanwhile). `record` is
    None when the job is gone or no config has anything left."""

    job_id: str
    record: JobRecord | None
    configs: dict[str, dict[str, Any]]
    cursors: dict[str, str]
    ready: frozenset[str]
    #: The job's adapter metadata (`JobMeta`), for the formats.
    meta: dict[str, str]
    events: list[Event]
    feed_exists: bool
    #: Each subscription's format name ("" when it was stored without one).
    formats: dict[str, str]

    def cursor(self, config_id: str) -> Cursor:
        raw = self.cursors.get(config_id)
        return Cursor.from_json(raw) if raw else Cursor()


class PushStore:
    """A job's push subscriptions, their delivery cursors, and the due set the delivery loop reads."""

    def __init__(self, store: RedisStore, audit: AuditHook | None = None) -> None:
        self.store = store
        self.audit = audit
        self.redis = store.redis
        self.keys = store.keys
        #: The store's runner: the push scripts (`store/scripts/push/`) are loaded with the job scripts.
        self.scripts = store.scripts

    # -- subscriptions (web side) -------------------------------------------------------
    def put(self, record: JobRecord, config: dict[str, Any], *, after: str,
            format: str | None = None) -> dict[str, Any]:
        """Store (or replace) a subscription, posted in `format`; delivery starts with the first event
        after `after`.

        On a finished job the subscription is done at once only when `after` is at the end of the feed:
        a SendMessage retried after its job finished (its first try submitted the job but never stored
        the subscription) asks for everything from `0-0`, the final state included. A feed that has
        already expired has nothing left to send. The job is due at once (score 0, not this host's
        clock, which the workers may not share).

        The subscription and its cursor are written together (one slot, the job's); the due entry after
        them, in a command of its own, since the due set lives in another slot of a Redis Cluster. A put
        that fails between the two has not been acknowledged: the client's retry writes the entry.
        """
        stored = json.dumps(config if format is None else {"format": format, "subscription": config})
        configs_key, cursors_key = self.keys.push_configs(record.id), self.keys.push_cursors(record.id)
        with redis_errors():
            # A finished job's feed gets no more entries, so its last one is the final state's.
            done = record.terminal and event_key(after) >= event_key(self.last_event_id(record.id))
            cursor = Cursor(after=after, done=done, tag=uuid.uuid4().hex[:12])
            stored_ok = self.scripts.call("push.put", [configs_key, cursors_key], config["id"], stored,
                                          cursor.to_json(), record.expires_ms, MAX_CONFIGS_PER_JOB)
            if not stored_ok:
                raise InvalidParams(f"A task may have at most {MAX_CONFIGS_PER_JOB} push configs.")
            self._schedule(record.id, 0)
        if self.audit is not None:
            self.audit(record.owner, "push_config.set", job_id=record.id, target=config["id"], owner=record.owner)
        return config

    def get(self, job_id: str, config_id: str) -> dict[str, Any] | None:
        with redis_errors():
            raw = self.redis.hget(self.keys.push_configs(job_id), config_id)
        return _decode(raw)[1] if isinstance(raw, str) else None

    def configs(self, job_id: str) -> list[dict[str, Any]]:
        with redis_errors():
            raw = self.redis.hgetall(self.keys.push_configs(job_id))
        return [_decode(v)[1] for _, v in sorted(raw.items())]

    def delete(self, job_id: str, config_id: str, *, owner: str | None = None) -> bool:
        """Whether the subscription was there; `owner`, the job's (who deletes it), for the audit trail."""
        with redis_errors():
            pipe = self.redis.pipeline(transaction=True)
            pipe.hdel(self.keys.push_configs(job_id), config_id)
            pipe.hdel(self.keys.push_cursors(job_id), config_id)
            removed, _ = pipe.execute()
        if removed and owner and self.audit is not None:
            self.audit(owner, "push_config.delete", job_id=job_id, target=config_id, owner=owner)
        return bool(removed)

    def last_event_id(self, job_id: str) -> str:
        """The id of the job's newest feed entry (`0-0` if the feed is empty or gone)."""
        with redis_errors():
            rows = self.redis.xrevrange(self.keys.events(job_id), count=1)
        return str(rows[0][0]) if rows else "0-0"

    # -- delivery (worker side) ---------------------------------------------------------
    def due(self, limit: int) -> tuple[int, list[str]]:
        """(Redis's time in ms, up to `limit` jobs due by then)."""
        with redis_errors():
            now, ids = self.scripts.call("push.due", [self.keys.push_due()], limit)
        return int(now), [str(i) for i in ids]

    def claim_many(self, job_ids: list[str], token: str, lease_ms: int, now_ms: int) -> list[str]:
        """Lock each job for this pass; the ones won are also moved `lease_ms` ahead in the due set, so
        no loop polls them while they are in flight (and a pass that dies is retried after the lease)."""
        if not job_ids:
            return []
        def build(pipe: Any) -> None:
            for job_id in job_ids:
                self.scripts.queue(pipe, "push.claim", [self.keys.push_lock(job_id)], token, lease_ms)

        # Redis restarted: the runner loads the scripts and claims again, which is harmless.
        outcomes = self.scripts.run(build)
        with redis_errors():
            won = [j for j, ok in zip(job_ids, outcomes, strict=True) if Locked(int(ok)) is Locked.HELD]
            if won:
                self.redis.zadd(self.keys.push_due(), dict.fromkeys(won, now_ms + lease_ms), xx=True)
        return won

    def owners(self, job_ids: list[str]) -> dict[str, str | None]:
        """Each job's owner (None when the job is gone), so a loop can share its passes between owners
        before it claims anything."""
        if not job_ids:
            return {}
        return dict(zip(job_ids, self.store.owners_of(job_ids), strict=True))

    def defer(self, job_ids: list[str], at_ms: int) -> None:
        """Put due jobs back to `at_ms` (only jobs still on the due set), behind the ones due before then.

        Only ever later: another loop may have claimed a job since `due` read it (its score is then that
        claim's lease end), and moving it earlier would make it due again while the claim holds."""
        if job_ids:
            with redis_errors():
                self.redis.zadd(self.keys.push_due(), dict.fromkeys(job_ids, at_ms), xx=True, gt=True)

    def cursors(self, job_id: str) -> dict[str, Cursor]:
        with redis_errors():
            raw = self.redis.hgetall(self.keys.push_cursors(job_id))
        return {str(k): Cursor.from_json(str(v)) for k, v in raw.items()}

    def try_claim(self, job_id: str, ttl_ms: int) -> str | None:
        """A short exclusive claim on delivering one job's events, so two workers never both post."""
        token = uuid.uuid4().hex
        with redis_errors():
            ok = self.scripts.call("push.claim", [self.keys.push_lock(job_id)], token, ttl_ms)
        return token if Locked(int(ok)) is Locked.HELD else None

    def release(self, job_id: str, token: str) -> None:
        with redis_errors():
            self.scripts.call("push.release", [self.keys.push_lock(job_id)], token)

    def read(self, job_id: str, now_ms: int) -> Pending:
        """The configs, cursors, feed and record of one job, as a pass at `now_ms` needs them."""
        k = self.keys
        with redis_errors():
            pipe = self.redis.pipeline(transaction=True)
            pipe.hgetall(k.push_configs(job_id))
            pipe.hgetall(k.push_cursors(job_id))
            raw_configs, cursors = pipe.execute()
            decoded = {str(i): _decode(v) for i, v in raw_configs.items()}
            configs = {i: subscription for i, (_, subscription) in decoded.items()}
            formats = {i: name for i, (name, _) in decoded.items()}
            open_cursors = {i: Cursor.from_json(cursors[i]) if i in cursors else Cursor() for i in configs}
            open_cursors = {i: c for i, c in open_cursors.items() if not c.done}
            ready = frozenset(i for i, c in open_cursors.items() if c.retry_at_ms <= now_ms)
            if not open_cursors:
                return Pending(job_id, None, configs, cursors, ready, {}, [], False, formats)
            pipe = self.redis.pipeline(transaction=True)
            if ready:
                # Configs waiting for a retry are left out: read from where they stand, the batch
                # might never reach the configs that are ahead of them.
                pipe.xread({k.events(job_id): min((open_cursors[i].after for i in ready), key=event_key)},
                           count=FEED_BATCH)
            pipe.exists(k.events(job_id))
            parse_record = self.store.queue_get(pipe, job_id)
            pipe.hgetall(k.job_meta(job_id))
            replies = pipe.execute()
        feed = replies.pop(0) if ready else None
        exists, raw_job, meta = replies
        entries = [e for _stream, rows in feed or [] for e in rows]
        record = parse_record(raw_job)
        return Pending(job_id, record, configs, cursors, ready, {str(n): str(v) for n, v in meta.items()},
                       [event(i, f) for i, f in entries], bool(exists), formats)

    def finish(self, pending: Pending, token: str, cursors: dict[str, Cursor], next_at_ms: int | None, *,
               claimed_at_ms: int | None = None) -> None:
        """Save a pass's cursors, set when the job is next due (None: done with it), release the lock.

        A next due time is set first, so a save that fails still leaves the job due. A job that is done
        leaves the due set only after the save, and only if nothing made it due at once meanwhile: a
        save that fails (or whose reply is lost) leaves it where the claim put it, looked at again when
        the lock lapses, and a config stored during the pass (due at once) is never taken off with it,
        nor a job moved since its claim gave it `claimed_at_ms`."""
        k = self.keys
        args: list[str] = [token]
        for config_id in pending.configs:
            old = pending.cursors.get(config_id, "")
            new = cursors[config_id].to_json() if config_id in cursors else old
            args += [config_id, old, new]
        keys = [k.job(pending.job_id), k.push_configs(pending.job_id), k.push_cursors(pending.job_id),
                k.push_lock(pending.job_id)]
        with redis_errors():
            if next_at_ms is not None:
                self._schedule(pending.job_id, next_at_ms)
            outcome = Saved(int(self.scripts.call("push.finish", keys, *args)))
            if outcome is Saved.CHANGED:
                self._schedule(pending.job_id, 0)
            elif outcome is Saved.SAVED and next_at_ms is None:
                settle_args: list[Any] = [pending.job_id]
                if claimed_at_ms is not None:
                    settle_args.append(claimed_at_ms)
                self.scripts.call("push.settle", [k.push_due()], *settle_args)

    def _schedule(self, job_id: str, at_ms: int) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(self.keys.push_due(), {job_id: at_ms})
        pipe.pexpire(self.keys.push_due(), self.store.max_ttl_ms)  # it may have expired meanwhile
        pipe.execute()
