"""Watching remote tasks that parked jobs wait on, at each remote's suggested interval.

`RemotePoller.poll_due` reads the remote schedule (`keys.remote_due`, Redis time); for each job due it asks the
remote how its task stands and wakes the job (`Waker.wake`) once the task ended or asks for input; the job then
records the end itself. A job that was cancelled or failed while its remote task ran gets that task cancelled.
A 2026-07-28 MCP task is also listened to (`listening`), which brings its next look forward.
It runs in every worker's main process and every sweeper; two looking at once cost a second GET, no more.
"""

from __future__ import annotations

import contextlib
import logging
import threading

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
from .status import DEFAULT_POLL_MS

log = logging.getLogger(__name__)
#: How often `run_forever` reads the schedule (seconds).
INTERVAL_S = 0.25
#: A job not parked (running, queued, asking its owner) is looked at again this much later (ms): to catch a cancel.
IDLE_LOOK_MS = 5000
#: An unreachable remote is asked again this much later (ms).
RETRY_MS = 5000


class RemotePoller:
    def __init__(self, store: RedisStore, waker: Waker, settings: Settings, batch: int = 100) -> None:
        self.store, self.waker, self.batch = store, waker, batch
        self.remotes = Remotes(settings)
        #: Told of 2026-07-28 MCP tasks' changes where their server notifies them (`subscriptions/listen`).
        self.listener = Listener(store, settings)

    def poll_due(self) -> int:
        """Look at every job due now; returns how many were woken."""
        now, due = self.store.due_remotes(self.batch)
        settled: list[tuple[str, str, int | None]] = []
        woken = 0
        for job_id, score in due:
            after, wake = self._look(job_id)
            woken += wake
            settled.append((job_id, score, None if after is None else now + after))
        self.store.settle_remotes(settled)
        return woken

    def _look(self, job_id: str) -> tuple[int | None, bool]:
        """(ms until the next look, or None to drop the entry; whether the job was woken)."""
        waiting = self.store.waiting_of(job_id)
        open_ = self.store.open_remotes(job_id) if waiting is not None else []
        if waiting is None or not open_:
            return None, False
        if waiting.state in (JobState.CANCELLED, JobState.FAILED):
            again = False
            for step, ref in open_:  # the job will never read it: stop the remote task too
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
            return (RETRY_MS if again else None), False
        if waiting.state is JobState.COMPLETED:
            return None, False
        step, ref = open_[-1]
        if ref.get("protocol") == "mcp-2026" and ref.get("taskId") and "final" not in ref:
            self.listener.follow(ref["url"], str(ref["taskId"]), job_id)
        if self.store.recorded_step(job_id, step + DONE) is not None:
            self.store.forget_remote(job_id, step)  # the job recorded the end but died before forgetting it
            return 0, False
        if waiting.state is not JobState.SUSPENDED:
            return IDLE_LOOK_MS, False
        try:
            status = self.remotes.get(ref, questions=False)
        except (RemoteError, TasksBackendError) as exc:
            log.info("remote task %s at %s unreadable: %s", ref.get("taskId"), ref.get("url"), exc)
            return RETRY_MS, False
        if status.terminal or status.state == "input_required":
            self.waker.wake(job_id, waiting.token, waiting.operation)
            return None, True
        return int(status.poll_ms or ref.get("pollMs") or DEFAULT_POLL_MS), False

    def run_forever(self, stop: threading.Event) -> None:
        try:
            def one_pass() -> None:
                self.poll_due()

            repeat(stop, one_pass, every_s=INTERVAL_S, name="remote poll", logger=log)
        finally:
            self.listener.close()
            with contextlib.suppress(Exception):
                self.remotes.close()
