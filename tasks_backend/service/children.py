"""What a cancel means for child jobs: a cancelled job's unfinished children are cancelled too, and a cancelled
child's parent may be waiting for it. Its unfinished remote tasks are cancelled by the remote poller."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ..errors import StoreUnavailable
from ..model.domain import JobRecord
from ..running.waking import Waker
from ..store.jobs import RedisStore
from ..store.outcomes import Cancelled

#: How deep a cancel follows children of children.
MAX_DEPTH = 16


#: What takes cancelled jobs that wait out of the dispatch gate (`DispatchGate.leave` with `waiting`).
Leave = Callable[[list[str]], None]


def after_cancel(store: RedisStore, waker: Waker, record: JobRecord, leave: Leave = lambda _: None) -> None:
    """Cancel the unfinished children of `record` (just cancelled), and theirs, each leaving the gate as a cancel
    does (`leave`); wake its parent if it waits for it. (A child this misses, as the process died, is cancelled when
    a worker next picks it up, see `Executor.run`; a parent this misses is woken by the wake schedule within
    seconds.)"""
    cancel_children(store, record.owner, record.id, leave)
    with contextlib.suppress(StoreUnavailable):
        if store.open_remotes(record.id):  # the remote poller cancels them now (and again later should this fail)
            store.watch_remote(record.id, 0)
    if record.parent_id is not None:
        with contextlib.suppress(StoreUnavailable):
            waker.check_parent(record.parent_id)


def cancel_children(store: RedisStore, owner: str, job_id: str, leave: Leave, depth: int = 0) -> None:
    cancelled = [c for c in store.child_ids(job_id) if store.request_cancel(c, owner) is Cancelled.CANCELLED]
    if cancelled:
        leave(cancelled)  # a held child would otherwise wait to be let in, only to be refused at its claim
    if depth < MAX_DEPTH:
        for child_id in cancelled:
            cancel_children(store, owner, child_id, leave, depth + 1)
