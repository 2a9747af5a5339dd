"""Watching remote tasks that parked jobs wait on, at each remote's suggested interval.

`RemotePoller.poll_due` reads the remote schedule (`keys.remote_due`, Redis time); for each job due it asks the
remote how its task stands and wakes the job (`Waker.wake`) once the task ended or asks for input; the job then
records the end itself. A job that was cancelled or failed while its remote task ran gets that task cancelled.
A 2026-07-28 MCP task is also listened to (`listening`), which brings its next look forward.
Looks run side by side (`looking`): a pass starts them and does not wait for them; each settles its own entry.
It runs in every worker's main process and every sweeper; two looking at once cost a second GET, no more.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from typing import Any

from ..config import Settings
from ..errors import TasksBackendError
from ..model.domain import JobState
from ..running.loops import repeat
from ..running.waking import Waker
from ..store.jobs import RedisStore
from ..store.remotes import DONE
from .access import RemoteError
from .client import Remotes
from .listening import Listener
from .looking import HostLimit, Lookers
from .status import DEFAULT_POLL_MS

log = logging.getLogger(__name__)
#: How often `run_forever` reads the schedule (seconds).
INTERVAL_S = 0.25
#: A job not parked (running, queued, asking its owner) is looked at again this much later (ms): to catch a cancel.
IDLE_LOOK_MS = 5000
#: An unreachable remote is asked again this much later (ms).
RETRY_MS = 5000
#: A look at a host that already has its `looking.PER_HOST` looks under way is put off this much (ms).
PUT_OFF_MS = 1000


class RemotePoller:
    def __init__(self, store: RedisStore, waker: Waker, settings: Settings, batch: int = 100) -> None:
        self.store, self.waker, self.batch = store, waker, batch
        self.remotes = Remotes(settings)
        #: Told of 2026-07-28 MCP tasks' changes where their server notifies them (`subscriptions/listen`).
        self.listener = Listener(store, settings)
        self.lookers, self.hosts = Lookers(), HostLimit()

    def poll_due(self) -> int:
        """Start a look at every job due now that is not being looked at here; returns how many it started."""
        now, due = self.store.due_remotes(self.batch)
        read_at = time.monotonic()
        return sum(self.lookers.submit(job_id, functools.partial(self._look_and_settle, job_id, score, now, read_at))
                   for job_id, score in due)

    def _look_and_settle(self, job_id: str, score: str, now: int, read_at: float) -> None:
        after = self._look(job_id)
        if self.lookers.stopped.is_set():
            return  # abandoned: its entry stays due, for another process to look
        if after is not None:  # `now` was Redis time when the pass read the schedule
            after += now + int(1000 * (time.monotonic() - read_at))
        self.store.settle_remotes([(job_id, score, after)])

    def _look(self, job_id: str) -> int | None:
        """Ms until the next look, or None to drop the entry."""
        waiting = self.store.waiting_of(job_id)
        open_ = self.store.open_remotes(job_id) if waiting is not None else []
        if waiting is None or not open_:
            return None
        if waiting.state in (JobState.CANCELLED, JobState.FAILED):
            with self.hosts.hold(str(ref.get("url")) for _, ref in open_) as held:
                return self._cancel(job_id, open_) if held else PUT_OFF_MS
        if waiting.state is JobState.COMPLETED:
            return None
        step, ref = open_[-1]
        if ref.get("protocol") == "mcp-2026" and ref.get("taskId") and "final" not in ref:
            self.listener.follow(ref["url"], str(ref["taskId"]), job_id)
        if self.store.recorded_step(job_id, step + DONE) is not None:
            self.store.forget_remote(job_id, step)  # the job recorded the end but died before forgetting it
            return 0
        if waiting.state is not JobState.SUSPENDED:
            return IDLE_LOOK_MS
        with self.hosts.hold([str(ref.get("url"))]) as held:
            if not held:
                return PUT_OFF_MS
            try:
                status = self.remotes.get(ref, questions=False)
            except (RemoteError, TasksBackendError) as exc:
                log.info("remote task %s at %s unreadable: %s", ref.get("taskId"), ref.get("url"), exc)
                return RETRY_MS
        if status.terminal or status.state == "input_required":
            self.waker.wake(job_id, waiting.token, waiting.operation)
            return None
        return int(status.poll_ms or ref.get("pollMs") or DEFAULT_POLL_MS)

    def _cancel(self, job_id: str, open_: list[tuple[str, dict[str, Any]]]) -> int | None:
        """The job will never read its open remote tasks: stop them too."""
        again = False
        for step, ref in open_:
            try:
                self.remotes.cancel(ref)
            except RemoteError as exc:
                log.info("remote task %s at %s not cancelled: %s", ref.get("taskId"), ref.get("url"), exc)
                if exc.code is None and (exc.status is None or exc.status >= 500):
                    again = True  # unreachable for now: try again later
                    continue
            except TasksBackendError as exc:  # its URL is no longer allowed
                log.info("remote task %s not cancelled: %s", ref.get("taskId"), exc)
            self.store.forget_remote(job_id, step)
        return RETRY_MS if again else None

    def run_forever(self, stop: threading.Event) -> None:
        try:
            def one_pass() -> None:
                self.poll_due()

            repeat(stop, one_pass, every_s=INTERVAL_S, name="remote poll", logger=log)
        finally:
            self.lookers.stop()
            self.listener.close()
            with contextlib.suppress(Exception):
                self.remotes.close()
