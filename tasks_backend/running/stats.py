"""Job metrics kept in Redis, so that any web process can report what every worker and sweeper did.

Workers record each outcome (with the job's duration from submit), each job they park on input, the jobs they
run and their push deliveries; sweepers record their actions. The figures are counters in Redis hashes, written
by each worker once a second per distinct counter (duration bucket and sum per operation and outcome; the other
figures are sums taken at read time), plus sorted sets of parked and running jobs, checked against the jobs'
states when read so those gauges heal themselves (a worker killed mid-job leaves an entry the read drops).
Rule: every key has a TTL that each write renews in its own pipeline (a renewal skipped because an earlier one was
sent can be lost with that earlier write, leaving the hash the next write makes without a TTL), and metrics never
fail a job: a write that cannot reach Redis is dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis

from ..model.domain import JobRecord, JobState
from ..store.jobs import RedisStore
from ..store.keys import Keys

log = logging.getLogger(__name__)

#: Upper bounds (seconds) of the duration histogram, from submit to a terminal state.
DURATION_BUCKETS: tuple[float, ...] = (0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86400)
#: Counters outlive any single job; an idle system lets them lapse after this long.
STATS_TTL_MS = 35 * 86400 * 1000

_SEP = "|"
_RECORDED = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.INPUT_REQUIRED})


@dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts (ending with +Inf), the sum and the count, as Prometheus wants them."""

    buckets: list[tuple[str, float]]
    total: float


@dataclass(frozen=True)
class Snapshot:
    outcomes: dict[tuple[str, str], float]
    durations: dict[str, Histogram]
    sweeps: dict[str, float]
    parked: int
    running: int
    push: dict[str, float]
    #: the audit trail's counters (`write_failures`: entries Redis refused or could not take)
    audit: dict[str, float]


def _bucket(seconds: float) -> str:
    for bound in DURATION_BUCKETS:
        if seconds <= bound:
            return f"{bound:g}"
    return "+Inf"


class JobStats:
    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self.redis: Any = store.redis
        self.keys: Keys = store.keys
        self._lock = threading.Lock()
        self._increments: dict[str, float] = {}
        self._parked: dict[str, int] = {}
        #: The jobs this process last wrote as running (it writes only what changed).
        self._running: set[str] = set()

    # -- writers (workers and sweepers) ----------------------------------------------
    def note_outcome(self, record: JobRecord, target: JobState, at_ms: int) -> None:
        """Count a worker's move of `record` to `target`; written by the next `flush_into`.

        Workers flush every second, so a figure may lag the job by that much, and a worker that dies
        loses at most a second's counts: a metric, not a record."""
        if target not in _RECORDED:
            return
        with self._lock:
            if target is JobState.INPUT_REQUIRED:
                self._parked[record.id] = record.expires_ms
                return
            seconds = max(0.0, (at_ms - record.created_ms) / 1000)
            prefix = f"{record.operation}{_SEP}{target.value}{_SEP}"
            for field, amount in ((f"{prefix}le{_bucket(seconds)}", 1.0), (f"{prefix}sum", seconds)):
                self._increments[field] = self._increments.get(field, 0.0) + amount

    def flush_into(self, pipe: Any, running: Mapping[str, int] | None = None) -> None:
        """Add what was noted since the last flush to `pipe`: one command per distinct counter. `running`: the
        jobs this process runs now (id -> the job's expiry, Redis ms); a job shorter than a flush is never written."""
        with self._lock:
            increments, parked = self._increments, self._parked
            self._increments, self._parked = {}, {}
            started, ended = {}, []
            if running is not None:
                started = {j: e for j, e in running.items() if j not in self._running}
                ended = [j for j in self._running if j not in running]
                self._running = set(running)
        if started:
            pipe.zadd(self.keys.stats("running"), started)
            pipe.pexpire(self.keys.stats("running"), STATS_TTL_MS)
        if ended:
            pipe.zrem(self.keys.stats("running"), *ended)
        jobs = self.keys.stats("jobs")
        for field, amount in increments.items():
            if field.endswith(f"{_SEP}sum"):
                pipe.hincrbyfloat(jobs, field, amount)
            else:
                pipe.hincrby(jobs, field, int(amount))
        if increments:
            pipe.pexpire(jobs, STATS_TTL_MS)
        if parked:
            pipe.zadd(self.keys.stats("parked"), parked)
            pipe.pexpire(self.keys.stats("parked"), STATS_TTL_MS)  # emptied when read: renewed every time

    def forget_running(self) -> None:
        """A flush failed: the next one writes every running job again."""
        with self._lock:
            self._running = set()

    def sweeper_actions(self, counts: Mapping[str, int]) -> None:
        """Called by the sweeper with how many jobs it handled per action in one pass."""
        self._add("sweeps", counts)

    def add_counts(self, name: str, counts: Mapping[str, int]) -> None:
        """Add to the counters of the `stats(name)` hash (push delivery's, through a `Tally`)."""
        self._add(name, counts)

    def _add(self, name: str, counts: Mapping[str, int]) -> None:
        counts = {k: v for k, v in counts.items() if v}
        if not counts:
            return
        try:
            pipe = self.redis.pipeline(transaction=False)
            for field, count in counts.items():
                pipe.hincrby(self.keys.stats(name), field, count)
            pipe.pexpire(self.keys.stats(name), STATS_TTL_MS)
            pipe.execute()
        except redis.RedisError as exc:
            log.debug("%s stats not recorded: %s", name, type(exc).__name__)

    # -- reader (web processes, at scrape time) ----------------------------------------
    def redis_now_ms(self) -> int:
        seconds, micros = self.redis.time()  # expiries are Redis's times, so is "now"
        return int(seconds) * 1000 + int(micros) // 1000

    def parked_now(self, now_ms: int | None = None) -> int:
        """Jobs waiting for input now; forgets jobs that expired or left `input_required`."""
        return self._in_state("parked", JobState.INPUT_REQUIRED, now_ms)

    def running_now(self, now_ms: int | None = None) -> int:
        """Jobs a worker runs now; forgets jobs that expired or are no longer `running` (a lost worker's)."""
        return self._in_state("running", JobState.RUNNING, now_ms)

    def _in_state(self, name: str, state: JobState, now_ms: int | None) -> int:
        key = self.keys.stats(name)
        self.redis.zremrangebyscore(key, "-inf", self.redis_now_ms() if now_ms is None else now_ms)
        members = [str(m) for m in self.redis.zrange(key, 0, -1)]
        if not members:
            return 0
        states = self.store.states_of(members)
        gone = [j for j, s in zip(members, states, strict=True) if s is not state]
        if gone:
            self.redis.zrem(key, *gone)
        return len(members) - len(gone)

    def oldest_waiting_s(self, in_flight: list[tuple[str, int]], now_ms: int, bypassed: str | None = None) -> float:
        """Seconds since the longest-waiting of `in_flight` ((job id, when sent to the broker) pairs, oldest first)
        that no worker has started was sent; 0 when every one of them runs. `bypassed`: the oldest job in the
        bypass list, sent to the broker when it was made (see `Keys.bypass_queue`), which may have waited longer."""
        waited = 0.0
        states = self.store.states_of([j for j, _ in in_flight])
        for (_, sent), state in zip(in_flight, states, strict=True):
            if state is JobState.QUEUED:
                waited = max(0.0, (now_ms - sent) / 1000)
                break
        record = self.store.get(bypassed) if bypassed else None
        if record is not None and record.state is JobState.QUEUED:
            waited = max(waited, (now_ms - record.created_ms) / 1000)
        return waited

    def snapshot(self) -> Snapshot:
        pipe = self.redis.pipeline(transaction=False)
        for name in ("jobs", "sweeps", "push", "audit"):
            pipe.hgetall(self.keys.stats(name))
        jobs_raw, sweeps_raw, push_raw, audit_raw = pipe.execute()
        outcomes: dict[tuple[str, str], float] = {}
        per_op: dict[str, dict[str, float]] = {}
        for field, value in jobs_raw.items():
            operation, outcome, name = _split(str(field))
            figures = per_op.setdefault(operation, {})
            figures[name] = figures.get(name, 0.0) + float(value)
            if name != "sum":
                outcomes[(operation, outcome)] = outcomes.get((operation, outcome), 0.0) + float(value)
        now = self.redis_now_ms()
        return Snapshot(outcomes, {op: _histogram(v) for op, v in per_op.items()},
                        {str(k): float(v) for k, v in sweeps_raw.items()}, self.parked_now(now),
                        self.running_now(now), {str(k): float(v) for k, v in push_raw.items()},
                        {str(k): float(v) for k, v in audit_raw.items()})


def _split(field: str) -> tuple[str, str, str]:
    """`<operation>|<outcome>|<le bucket or sum>`; the operation may itself hold the separator."""
    rest, _, name = field.rpartition(_SEP)
    operation, _, outcome = rest.rpartition(_SEP)
    return operation, outcome, name


def _histogram(values: Mapping[str, float]) -> Histogram:
    running = 0.0
    buckets: list[tuple[str, float]] = []
    for bound in [f"{b:g}" for b in DURATION_BUCKETS] + ["+Inf"]:
        running += values.get(f"le{bound}", 0.0)
        buckets.append((bound, running))
    return Histogram(buckets, values.get("sum", 0.0))


class Tally:
    """Counts kept in memory by many threads and added to a stats hash now and then (push delivery's POSTs:
    delivered, failed, and the events given up after the last attempt: `given_up`)."""

    def __init__(self, stats: JobStats, name: str) -> None:
        self.stats, self.name = stats, name
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._written_at = time.monotonic()

    def add(self, field: str) -> None:
        with self._lock:
            self._counts[field] += 1

    def write(self, every_s: float = 0.0) -> None:
        """Write what was counted, at most every `every_s`; a write that fails drops it (a metric, not a record)."""
        if time.monotonic() - self._written_at < every_s:
            return
        with self._lock:
            counts, self._counts = self._counts, Counter()
        self._written_at = time.monotonic()
        self.stats.add_counts(self.name, counts)
