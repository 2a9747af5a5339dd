"""Following several jobs at once from one held stream (MCP `subscriptions/listen`).

Every job's changes are read by one blocking read over all their feeds, in the greenlet (or thread) that serves
the stream: however many jobs a stream names, it holds one Redis connection, its reads end when the stream does
(the process stopping or the client hanging up interrupts them, see `drain`), and nothing reads on for a stream
that is gone.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence

from ..model.domain import JobRecord
from ..serving.drain import Interrupted
from .jobs import JobService


def follow(service: JobService, records: Sequence[JobRecord], *, max_s: float,
           block_ms: int) -> Iterator[JobRecord]:
    """Each of `records` (jobs the caller may see, as they stand), then the job each change leaves, as it comes,
    until every job is terminal or gone, `max_s` has passed, or the read is interrupted."""
    current = {record.id: record for record in records}
    yield from current.values()
    cursors = {job_id: "0-0" for job_id, record in current.items() if not record.terminal}
    deadline = time.monotonic() + max_s
    while cursors and (left := deadline - time.monotonic()) > 0:
        try:
            with service.drain.read():
                feeds = service.store.events_many(cursors, min(block_ms, max(1, math.ceil(left * 1000))))
        except Interrupted:
            return
        if not feeds:
            # Nothing new: a job whose keys expired has no feed left to follow.
            alive = service.store.get_many(list(cursors))
            for job_id, record in zip(list(cursors), alive, strict=True):
                if record is None:
                    del cursors[job_id]
            continue
        for job_id, events in feeds.items():
            cursors[job_id] = events[-1].id
            current[job_id] = service.apply_event(current[job_id], events[-1])
            yield current[job_id]
            if current[job_id].terminal:
                del cursors[job_id]
