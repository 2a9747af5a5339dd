"""Job metrics kept in Redis, so that any web process can report what every worker and sweeper did.

Workers record each outcome (with the job's duration from submit) and each job they park on input; sweepers
record their actions. The figures are counters in two Redis hashes, written by each worker once a second per
distinct counter (duration bucket and sum per operation and outcome; the other figures are sums taken at
read time), plus one sorted set of parked jobs, pruned when read so the "parked now" gauge heals itself.
Rule: every key has a TTL that the writers renew (the counter hashes at most once a minute per process), and
metrics never fail a job: a write that cannot reach Redis is dropped.
"""

from __future__ import annotations

import logging
import threading
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

    def flush_into(self, pipe: Any) -> None:
        """Add what was noted since the last flush to `pipe`: one command per distinct counter."""
        with self._lock:
            increments, parked = self._increments, self._parked
            self._increments, self._parked = {}, {}
        jobs = self.keys.stats("jobs")
        for field, amount in increments.items():
            if field.endswith(f"{_SEP}sum"):
                pipe.hincrbyfloat(jobs, field, amount)
            else:
                pipe.hincrby(jobs, field, int(amount))
        if increments:
            self.store.keep_ttl(pipe, jobs, STATS_TTL_MS)
        if parked:
            pipe.zadd(self.keys.stats("parked"), parked)
            pipe.pexpire(self.keys.stats("parked"), STATS_TTL_MS)  # emptied when read: renewed every time

    def sweeper_actions(self, counts: Mapping[str, int]) -> None:
        """Called by the sweeper with how many jobs it handled per action in one pass."""
        if not counts:
            return
        try:
            pipe = self.redis.pipeline(transaction=False)
            for action, count in counts.items():
                pipe.hincrby(self.keys.stats("sweeps"), action, count)
            self.store.keep_ttl(pipe, self.keys.stats("sweeps"), STATS_TTL_MS)
            pipe.execute()
        except redis.RedisError as exc:
            log.debug("sweeper stats not recorded: %s", type(exc).__name__)

    # -- reader (web processes, at scrape time) ----------------------------------------
    def parked_now(self) -> int:
        """Jobs waiting for input now; forgets jobs that expired or left `input_required`."""
        key = self.keys.stats("parked")
        seconds, micros = self.redis.time()  # expiries are Redis's times, so is "now"
        self.redis.zremrangebyscore(key, "-inf", int(seconds) * 1000 + int(micros) // 1000)
        members = [str(m) for m in self.redis.zrange(key, 0, -1)]
        if not members:
            return 0
        states = self.store.states_of(members)
        gone = [j for j, s in zip(members, states, strict=True) if s is not JobState.INPUT_REQUIRED]
        if gone:
            self.redis.zrem(key, *gone)
        return len(members) - len(gone)

    def snapshot(self) -> Snapshot:
        pipe = self.redis.pipeline(transaction=False)
        for name in ("jobs", "sweeps"):
            pipe.hgetall(self.keys.stats(name))
        jobs_raw, sweeps_raw = pipe.execute()
        outcomes: dict[tuple[str, str], float] = {}
        per_op: dict[str, dict[str, float]] = {}
        for field, value in jobs_raw.items():
            operation, outcome, name = _split(str(field))
            figures = per_op.setdefault(operation, {})
            figures[name] = figures.get(name, 0.0) + float(value)
            if name != "sum":
                outcomes[(operation, outcome)] = outcomes.get((operation, outcome), 0.0) + float(value)
        return Snapshot(outcomes, {op: _histogram(v) for op, v in per_op.items()},
                        {str(k): float(v) for k, v in sweeps_raw.items()}, self.parked_now())


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
