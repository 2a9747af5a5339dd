"""The push delivery loop: due jobs taken from the push due set, each config's new events posted in its format.

Rule: runs in a worker's main process, never in a web request (`workers.push` starts and stops it); the formats
are handed in by the command line, so nothing here knows a protocol. Times compared between processes come from
Redis's clock.
"""

from __future__ import annotations

import dataclasses
import http.client
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any

from ..config import Settings
from ..errors import ServiceUnavailable, StoreUnavailable
from ..model.domain import JobRecord, JobState
from ..running.stats import JobStats, Tally
from ..serving.tracing import Tracing, job_attributes
from ..store.connect import through_outage
from ..store.feeds import Event
from ..store.jobs import RedisStore
from .fair import Breakers, FairPool, target_of
from .subscriptions import FEED_BATCH, Cursor, Pending, PushFormat, PushStore, SignedPushFormat, event_key
from .webhook import post_event

log = logging.getLogger(__name__)

#: How long a pass's save is retried while Redis is unreachable (a restart, a stall).
SAVE_TOLERANCE_S = 4.0
#: How often an unfinished job's feed is read for new events, and how often the due set is polled.
FOLLOW_MS = 250
IDLE_S = 0.2
CLAIM_MS = 60_000
#: Backoff between attempts of one event: 0.5 s, 1 s, 2 s, ... capped.
BACKOFF_BASE_MS = 500
BACKOFF_MAX_MS = 60_000
#: How often the POSTs' outcomes are written to the metrics (seconds).
COUNTS_EVERY_S = 1.0
#: How far an owner's due job is put back when that owner already has its share of passes here.
DEFER_MS = 1000
_REFRESH = (JobState.COMPLETED, JobState.FAILED, JobState.INPUT_REQUIRED)


def backoff_ms(attempts: int) -> int:
    return int(min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** max(0, attempts - 1)))


class _Clock:
    """Redis's time as read at the start of a pass, moved on by this process's monotonic clock."""

    def __init__(self, redis_ms: int) -> None:
        self.redis_ms = redis_ms
        self.started = time.monotonic()

    def now(self) -> int:
        return self.redis_ms + int((time.monotonic() - self.started) * 1000)


class _JobPass:
    """One job's pass: its configs are delivered in the pool; the last one to finish saves them all."""

    def __init__(self, deliverer: PushDeliverer, pending: Pending, token: str, clock: _Clock,
                 owner: str = "", claimed_at_ms: int | None = None) -> None:
        self.deliverer = deliverer
        self.pending = pending
        self.token = token
        self.clock = clock
        self.owner = owner
        #: The due time the claim gave the job: it leaves the due set only if nobody moved it since.
        self.claimed_at_ms = claimed_at_ms
        self.posted = 0
        self.cursors: dict[str, Cursor] = {}
        self.more: set[str] = set()
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._left = 0

    def start(self) -> int:
        """Submit the configs that have something to do now; returns how many were submitted."""
        work = sorted(self.pending.ready) if self.pending.record is not None else []
        self._left = len(work)
        if not work:
            self._finish()
        for config_id in work:
            self.deliverer.submit(self, config_id)
        return len(work)

    def config_done(self, config_id: str, posted: int, cursor: Cursor, more: bool) -> None:
        with self._lock:
            self.posted += posted
            self.cursors[config_id] = cursor
            if more:
                self.more.add(config_id)
            self._left -= 1
            last = self._left == 0
        if last:
            self._finish()

    def next_at(self) -> int | None:
        """When the job is next due: never in the past unless there is more to send right away."""
        record = self.pending.record
        if record is None:
            return None  # expired: its configs and cursors expire with it
        now = self.clock.now()
        times: list[int] = []
        for config_id in self.pending.configs:
            cursor = self.cursors.get(config_id) or self.pending.cursor(config_id)
            if cursor.done:
                continue
            if cursor.attempts:
                times.append(max(cursor.retry_at_ms, now + 1))
            elif config_id in self.more:
                times.append(now)
            else:
                times.append(now + FOLLOW_MS)  # following a running job's feed
        return min(times) if times else None

    def _finish(self) -> None:
        # A brief outage (a Redis restart or stall) is waited out here: left to the lock's lapse, the save would
        # wait a minute, and every event this pass posted would be posted again.
        try:
            through_outage(lambda: self.deliverer.push.finish(self.pending, self.token, self.cursors, self.next_at(),
                                                              claimed_at_ms=self.claimed_at_ms),
                           SAVE_TOLERANCE_S, self.deliverer.stop)
        except StoreUnavailable:
            log.warning("push delivery for job %s not saved: Redis is unreachable (retried after the lease)",
                        self.pending.job_id)
        except Exception as exc:
            log.warning("push delivery for job %s not saved: %s", self.pending.job_id, type(exc).__name__)
        finally:
            self.deliverer.pass_ended(self)
            self.done.set()


class PushDeliverer:
    """Delivers due jobs' push notifications, in a loop (`run_forever`) or once (`deliver_once`).

    A loop in each worker process takes due jobs from the push due set and locks each one (so two workers
    never post the same job's events); it reads the job's feed after each config's cursor and hands each
    config to a small thread pool (`push_concurrency`), which POSTs what the subscription's format (the
    adapter that stored it: an A2A config gets StreamResponses) makes of each change, in order, each POST
    within a total deadline. A slow or broken receiver holds one pool thread for at most
    that deadline per pass and delays no other config. When a pass ends, the job's next due time is set
    first, then one script saves the cursors and releases the lock, and a job with nothing left leaves the
    due set only after that save succeeded (`PushStore.finish`): a save that fails leaves the job due.

    Owners share delivery fairly (`fair`): each process holds at most half its passes for one owner
    (the owner's other due jobs are put back a second, behind everyone else's), serves the owners' POSTs
    in turn with at most half the threads for one owner, and stops calling a target that keeps not
    answering for a while (its attempts fail at once, as failed attempts).

    A failed POST (whatever the reason) is retried with exponential backoff; after `push_max_attempts`
    that event is skipped for that config, so one dead receiver cannot stall the rest. The final state is
    kept until every config has it or gave up on it: once the feed has expired (a minute after the end)
    it is rebuilt from the job record, which lives until the job's TTL; the feed's earlier entries are
    then given up. Delivery is at least once: a worker that dies between a POST and saving the cursor
    posts it again.
    """

    def __init__(self, store: RedisStore, settings: Settings, batch: int = 100,
                 *, formats: Mapping[str, PushFormat], tracing: Tracing | None = None) -> None:
        self.store = store
        #: A span per POST, in the job's trace (off unless the worker's tracing is on).
        self.tracing = tracing or Tracing.off()
        #: Format name -> format: every adapter's, handed in by the command line
        #: (`tasks-backend worker`).
        self.formats = dict(formats)
        self.push = PushStore(store)
        self.settings = settings
        self.batch = batch
        self.workers = max(1, settings.push_concurrency)
        timeout_ms = int(settings.push_timeout_s * 1000)
        # A pass stops starting POSTs halfway through its lease, and a POST ends within the timeout,
        # so the lock is released (and the cursors saved) before another worker could take the job.
        self.lease_ms = max(CLAIM_MS, 4 * timeout_ms)
        self.budget_s = self.lease_ms / 2000
        self.stop = threading.Event()
        #: Passes this process holds at once, and for one owner: half, so others always find room.
        self.max_passes = 2 * self.workers
        self.owner_passes = self.workers
        self._pool = FairPool(self.workers, max(1, self.workers // 2))
        self.breakers = Breakers()
        self._held: Counter[str] = Counter()
        self._changed = threading.Condition()
        #: POSTs delivered or failed and events given up, for the metrics.
        self.tally = Tally(JobStats(store), "push")

    def close(self) -> None:
        self._pool.shutdown()
        self.tally.write()

    # -- the loop -----------------------------------------------------------------------
    def deliver_once(self) -> int:
        """Start every due job and wait for them; returns how many notifications were posted."""
        passes, _ = self._start(self.batch)
        for job_pass in passes:
            job_pass.done.wait()
        self.tally.write()
        return sum(p.posted for p in passes)

    def run_forever(self, stop: threading.Event) -> None:
        self.stop = stop
        try:
            while not stop.is_set():
                with self._changed:
                    room = self.max_passes - sum(self._held.values())
                started: list[_JobPass] = []
                deferred = 0
                try:
                    if room > 0:
                        started, deferred = self._start(min(room, self.batch))
                except ServiceUnavailable:
                    log.warning("push delivery paused: Redis is unreachable")
                except Exception:
                    log.exception("push delivery pass failed")
                self.tally.write(COUNTS_EVERY_S)
                # Jobs put back may hide others' due jobs behind them: look again at once.
                if not started and not deferred:
                    with self._changed:  # until a pass ends (room, or a job due again) or a while
                        self._changed.wait(IDLE_S)
        finally:
            self.close()

    def _start(self, limit: int) -> tuple[list[_JobPass], int]:
        """Start passes for up to `limit` due jobs; returns them and how many due jobs were put back.

        An owner that already has its share of passes here gets no more: its other due jobs are put
        back `DEFER_MS`, behind the others' (so the next look at the due set finds what they hid)."""
        now, due = self.push.due(limit)
        owners = self.push.owners(due)
        take: list[str] = []
        defer: list[str] = []
        with self._changed:
            held = Counter(self._held)
        for job_id in due:
            owner = owners.get(job_id) or ""
            if held[owner] >= self.owner_passes:
                defer.append(job_id)
            else:
                held[owner] += 1
                take.append(job_id)
        self.push.defer(defer, now + DEFER_MS)
        token = uuid.uuid4().hex
        clock = _Clock(now)
        passes = []
        for job_id in self.push.claim_many(take, token, self.lease_ms, now):
            try:
                pending = self.push.read(job_id, now)
            except ServiceUnavailable:
                raise
            except Exception as exc:  # unreadable data of one job: it is tried again after the lease
                log.warning("push delivery for job %s skipped: %s", job_id, type(exc).__name__)
                continue
            owner = pending.record.owner if pending.record is not None else owners.get(job_id) or ""
            job_pass = _JobPass(self, pending, token, clock, owner, now + self.lease_ms)
            with self._changed:
                self._held[owner] += 1
            passes.append(job_pass)
            job_pass.start()
        return passes, len(defer)

    def pass_ended(self, job_pass: _JobPass) -> None:
        with self._changed:
            self._held[job_pass.owner] -= 1
            if self._held[job_pass.owner] <= 0:
                del self._held[job_pass.owner]
            self._changed.notify_all()

    def submit(self, job_pass: _JobPass, config_id: str) -> None:
        self._pool.submit(job_pass.owner, lambda: self._run(job_pass, config_id))

    def _run(self, job_pass: _JobPass, config_id: str) -> None:
        pending = job_pass.pending
        cursor = pending.cursor(config_id)
        posted, more = 0, False
        try:
            posted, cursor, more = self._deliver_config(job_pass, pending.configs[config_id], cursor)
        except Exception as exc:  # isolated: one config's failure is its own failed attempt
            log.info("push to config %s of job %s failed: %s", config_id, pending.job_id, type(exc).__name__)
            # Given up, this skips everything the pass read: the same input would fail the same way.
            record = pending.record
            skip_to = pending.events[-1].id if pending.events else cursor.after
            cursor = self._failed(job_pass, config_id, cursor, skip_to, bool(record and record.terminal))
        finally:
            job_pass.config_done(config_id, posted, cursor, more)

    # -- one config ---------------------------------------------------------------------
    def _deliver_config(self, job_pass: _JobPass, config: dict[str, Any],
                        cursor: Cursor) -> tuple[int, Cursor, bool]:
        """Post what one config has not seen yet, oldest first; returns (posted, cursor, more waiting)."""
        pending = job_pass.pending
        record = pending.record
        assert record is not None
        cut = len(pending.events) >= FEED_BATCH  # the read stopped early: more may follow
        events = [e for e in pending.events if event_key(e.id) > event_key(cursor.after)]
        items: list[tuple[str, JobRecord]]
        if events:
            items = [(e.id, self._view(record, e)) for e in _latest_per_run(events)]
        elif cut:
            return 0, cursor, True
        elif not record.terminal:
            return 0, dataclasses.replace(cursor, attempts=0, retry_at_ms=0), False
        elif pending.feed_exists:
            return 0, dataclasses.replace(cursor, attempts=0, retry_at_ms=0, done=True), False  # at the end
        else:
            # The feed expired before this config caught up: what it missed of the way is given up,
            # the final state is rebuilt from the record.
            items = [(cursor.after, record)]
        fmt = self._format(pending.formats.get(str(config.get("id")), ""))
        posted = 0
        for after, view in items:
            if self.stop.is_set() or time.monotonic() - job_pass.clock.started > self.budget_s:
                return posted, cursor, True
            for body, headers in self._posts(fmt, config, view, pending, after):
                if not self._traced_post(record, config, body, headers, owner=job_pass.owner):
                    return posted, self._failed(job_pass, config["id"], cursor, after, view.terminal), False
                posted += 1
            cursor = Cursor(after=after, done=view.terminal, tag=cursor.tag)
            if cursor.done:
                break
        return posted, cursor, cut

    def _failed(self, job_pass: _JobPass, config_id: str, cursor: Cursor, item: str, final: bool) -> Cursor:
        """The cursor after a failed attempt at the item that would move it to `item`."""
        attempts = cursor.attempts + 1
        if attempts >= self.settings.push_max_attempts:
            self.tally.add("given_up")
            log.warning("push to config %s of job %s: giving up on one event after %d attempts",
                        config_id, job_pass.pending.job_id, attempts)
            return Cursor(after=item, done=final, tag=cursor.tag)
        return dataclasses.replace(cursor, attempts=attempts,
                                   retry_at_ms=job_pass.clock.now() + backoff_ms(attempts))

    def _posts(self, fmt: PushFormat, config: dict[str, Any], view: JobRecord, pending: Pending,
               after: str) -> list[tuple[dict[str, Any] | bytes, Mapping[str, str]]]:
        """What one change of the job is posted as to one config: each body and its headers."""
        if isinstance(fmt, SignedPushFormat):
            # The same id on every attempt at this change: the feed entry (or, rebuilt from the record after
            # the feed expired, the entry the cursor stands at), and the state, which differs from that entry's.
            message_id = f"{pending.job_id}.{config.get('id')}.{after}.{view.state.value}"
            return list(fmt.posts(config, view, pending.meta, message_id=message_id, store=self.store))
        headers = fmt.headers(config)
        return [(body, headers) for body in fmt.bodies(view, pending.meta)]

    def _view(self, record: JobRecord, event: Event) -> JobRecord:
        """The job as of one event; results, errors and input requests come from the stored record."""
        if event.state in _REFRESH and record.state is event.state:
            return record
        return dataclasses.replace(record, state=event.state, updated_ms=event.updated_ms,
                                   status_message=event.message, progress=event.progress, total=event.total)

    def _format(self, name: str) -> PushFormat:
        """The format of a subscription; one stored without a name (before formats were named) is
        posted in the only format there is that makes no POSTs of its own (`SignedPushFormat` came after
        the names). An unknown name fails the attempt, like a failed POST."""
        fmt = self.formats.get(name)
        if fmt is None and not name:
            plain = [f for f in self.formats.values() if not isinstance(f, SignedPushFormat)]
            fmt = plain[0] if len(plain) == 1 else None
        if fmt is None:
            raise LookupError(f"no push format {name!r}")
        return fmt

    def _traced_post(self, record: JobRecord, config: dict[str, Any], body: dict[str, Any] | bytes,
                     headers: Mapping[str, str] | None, *, owner: str) -> bool:
        """`_post`, as a span under the job's submit: the config's id, never its URL or token."""
        if not self.tracing.enabled:
            return self._post(record.id, config, body, headers, owner=owner)
        with self.tracing.span("push delivery", parent=record.trace, attributes={
                **job_attributes(record.id, record.operation, record.owner),
                "tasks_backend.push.config": str(config.get("id", ""))}):
            delivered = self._post(record.id, config, body, headers, owner=owner)
            if not delivered:
                self.tracing.failed("not delivered")
            return delivered

    def _post(self, job_id: str, config: dict[str, Any], body: dict[str, Any] | bytes,
              headers: Mapping[str, str] | None = None, *, owner: str = "") -> bool:
        """One POST; any failure is logged (its kind only: messages may quote URLs or secrets).

        A target whose breaker (the owner's own) is open is not called: the attempt fails at once, as the POST would."""
        delivered = self._attempt(job_id, config, body, headers, owner)
        self.tally.add("delivered" if delivered else "failed")
        return delivered

    def _attempt(self, job_id: str, config: dict[str, Any], body: dict[str, Any] | bytes,
                 headers: Mapping[str, str] | None, owner: str) -> bool:
        target = target_of(owner, str(config.get("url", "")))
        if not self.breakers.allow(target):
            log.debug("push to config %s of job %s not sent: its target is not answering", config.get("id"), job_id)
            return False
        answered: bool | None = None  # None: the attempt said nothing about the target (refused by the guard...)
        try:
            if headers is None:
                headers = self._format("").headers(config)
            status = post_event(config, body, allow_private=self.settings.push_allow_private,
                                timeout_s=self.settings.push_timeout_s, headers=headers)
            answered = True
        except (OSError, http.client.HTTPException) as exc:  # no HTTP answer: a timeout, a refused connection...
            answered = False
            log.info("push to config %s of job %s failed: %s", config.get("id"), job_id, type(exc).__name__)
            return False
        except Exception as exc:
            log.info("push to config %s of job %s failed: %s", config.get("id"), job_id, type(exc).__name__)
            return False
        finally:
            self.breakers.record(target, answered)
        if not 200 <= status < 300:
            log.info("push to config %s of job %s answered %s", config.get("id"), job_id, status)
            return False
        return True


def _latest_per_run(events: list[Event]) -> list[Event]:
    """Drop an event when the next one has the same state: a burst of progress becomes its latest."""
    following: list[Event | None] = [*events[1:], None]
    return [e for e, nxt in zip(events, following, strict=False) if nxt is None or nxt.state is not e.state]
