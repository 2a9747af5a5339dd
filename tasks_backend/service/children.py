"""What a cancel means for child jobs: a cancelled job's unfinished children are cancelled too, and a cancelled
child's parent may be waiting for it. Its unfinished remote tasks are cancelled by the remote poller. And the job
service's side of a child's making (`ChildJobs`): its place in its parent's index."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ..config import Settings
from ..errors import StoreUnavailable
from ..model.domain import JobRecord, JobState
from ..running.dispatch import Dispatcher
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


class ChildJobs:
    """JobService's: a child in its parent's index, and what follows a cancel."""

    store: RedisStore
    dispatcher: Dispatcher
    settings: Settings
    #: JobService's: cancelled jobs out of the dispatch gate.
    _cancelled_leave: Leave

    def _indexed_child(self, parent_id: str, child: JobRecord) -> JobRecord:
        """The child in its parent's index, living as long as the parent; cancelled when the parent was cancelled (or
        is gone) meanwhile: that cancel may have read the index before the child was in it, and a worker may be
        running the child already."""
        parent = self.store.index_child(parent_id, child.id)
        if parent is not None and parent[0] is not JobState.CANCELLED:
            if parent[1] > child.expires_ms + 1000:
                # The parent was given longer to live after its spawn read its time left (a rerun took it over), by
                # a lengthening that read its index before this child was in it.
                self.store.adopt(child.id, parent[1])
            return child
        cancelled = self.store.request_cancel(child.id, child.owner) is Cancelled.CANCELLED
        if cancelled:
            self._cancelled_leave([child.id])
        record = self.store.get(child.id) or child
        if cancelled:  # what follows any cancel: a child a rerun kept (`service.rerun`) may have children of its own
            self._after_cancel(record)
        return record

    def _after_cancel(self, record: JobRecord) -> None:
        """A job just cancelled: its unfinished children and remote tasks with it, and its parent told."""
        after_cancel(self.store, self._waker(), record, self._cancelled_leave)

    def _waker(self) -> Waker:
        return Waker(self.store, self.dispatcher, self.settings)
