"""What a bench reads of a side's queues: the jobs not yet taken, waiting until none are, forgetting them.

A side's jobs wait in its broker list (and the list a lone owner's jobs skip the gate to) and, in a revision with a
dispatch gate, in the gate's held and delayed sets
(`store.keys`); Celery's Redis transport keeps what a worker took but has not acknowledged in `unacked`. The
callers poll these every few milliseconds inside measured windows, so each gets one client, made once, and one
round trip per reading.
"""

from __future__ import annotations

import time

import redis

from tasks_backend.store.keys import Keys

#: The gate's parts that hold jobs no worker has been sent.
WAITING = ("ready", "delayed")
UNACKED = "unacked"


def queued(db: redis.Redis, queue: str, keys: Keys, gate_queue: str | None = None) -> int:
    """Jobs not yet taken: the broker list `queue`'s, and those the dispatch gate of `gate_queue` (default: the
    same queue) holds or delays (none where there is no gate)."""
    pipe = db.pipeline(transaction=False)
    pipe.llen(queue)
    pipe.llen(Keys.bypass_queue(queue))
    for part in WAITING:
        pipe.zcard(keys.gate(gate_queue or queue, part))
    return sum(int(n) for n in pipe.execute())


def wait_idle(db: redis.Redis, queue: str, keys: Keys, gate_queue: str | None = None,
              timeout_s: float = 120) -> None:
    """Until nothing is queued (`queued`) and nothing taken is unacknowledged, or `timeout_s` passed."""
    deadline = time.monotonic() + timeout_s
    while (queued(db, queue, keys, gate_queue) or db.hlen(UNACKED)) and time.monotonic() < deadline:
        time.sleep(0.05)


def purge(db: redis.Redis, queue: str, keys: Keys) -> None:
    """Forget what submits left queued (no worker runs them): the broker list and every key of its gate."""
    db.delete(queue, Keys.bypass_queue(queue), *keys.gate_keys(queue))
