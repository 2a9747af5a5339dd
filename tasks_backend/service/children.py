"""What a cancel means for child jobs: a cancelled job's unfinished children are cancelled too, and a cancelled
child's parent may be waiting for it. Its unfinished remote tasks are cancelled by the remote poller."""

from __future__ import annotations

import contextlib

from ..errors import StoreUnavailable
from ..model.domain import JobRecord
from ..running.waking import Waker
from ..store.jobs import RedisStore
from ..store.outcomes import Cancelled

#: How deep a cancel follows children of children.
MAX_DEPTH = 16


def after_cancel(store: RedisStore, waker: Waker, record: JobRecord) -> None:
    """Cancel the unfinished children of `record` (just cancelled), and theirs; wake its parent if it waits
    for it. (A child this misses, as the process died, is cancelled when a worker next picks it up, see
    `Executor.run`; a parent this misses is woken by the wake schedule within seconds.)"""
    cancel_children(store, record.owner, record.id)
    with contextlib.suppress(StoreUnavailable):
        if store.open_remotes(record.id):  # the remote poller cancels them now (and again later should this fail)
            store.watch_remote(record.id, 0)
    if record.parent_id is not None:
        with contextlib.suppress(StoreUnavailable):
            waker.check_parent(record.parent_id)


def cancel_children(store: RedisStore, owner: str, job_id: str, depth: int = 0) -> None:
    for child_id in store.child_ids(job_id):
        if store.request_cancel(child_id, owner) is Cancelled.CANCELLED and depth < MAX_DEPTH:
            cancel_children(store, owner, child_id, depth + 1)
