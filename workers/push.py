"""A2A push-notification delivery, run by worker processes (never by a web request).

A loop in each worker process takes jobs from the push due set, claims one job at a time (so two
workers never post the same job's events), reads its event feed after each config's cursor and POSTs
one StreamResponse per change. A failed POST is retried with exponential backoff; after
`push_max_attempts` that event is skipped for that config so one dead receiver cannot stall the rest.
Delivery is at least once: a worker that dies between a POST and saving the cursor posts it again.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any

from celery import Celery, bootsteps

from adapters import a2a_wire as wire
from tasks_backend.config import Settings
from tasks_backend.domain import JobRecord, JobState, now_ms
from tasks_backend.errors import ServiceUnavailable, TasksBackendError
from tasks_backend.keys import Keys
from tasks_backend.push import Cursor, PushStore, post_event
from tasks_backend.store import Event, RedisStore, connect

log = logging.getLogger(__name__)

#: How often an unfinished job's feed is read for new events, and how often the due set is polled.
FOLLOW_MS = 250
IDLE_S = 0.2
CLAIM_MS = 60_000
#: Backoff between attempts of one event: 0.5 s, 1 s, 2 s, ... capped.
BACKOFF_BASE_MS = 500
BACKOFF_MAX_MS = 60_000
_REFRESH = (JobState.COMPLETED, JobState.FAILED, JobState.INPUT_REQUIRED)


def backoff_ms(attempts: int) -> int:
    return int(min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** max(0, attempts - 1)))


class PushDeliverer:
    def __init__(self, store: RedisStore, settings: Settings, batch: int = 100) -> None:
        self.store = store
        self.push = PushStore(store)
        self.settings = settings
        self.batch = batch

    def deliver_once(self) -> int:
        """One pass over the jobs that are due; returns how many notifications were posted."""
        posted = 0
        for job_id in self.push.due(now_ms(), self.batch):
            claim = self.push.try_claim(job_id, CLAIM_MS)
            if claim is None:
                continue
            try:
                sent, next_at = self._deliver_job(job_id)
                posted += sent
                self.push.reschedule(job_id, next_at)
            finally:
                self.push.release(job_id, claim)
        return posted

    def run_forever(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                if self.deliver_once():
                    continue
            except ServiceUnavailable:
                log.warning("push delivery paused: Redis is unreachable")
            except Exception:
                log.exception("push delivery pass failed")
            stop.wait(IDLE_S)

    def _deliver_job(self, job_id: str) -> tuple[int, int | None]:
        """Post what each config has not seen yet; returns (posted, when to look again or None)."""
        record = self.store.get(job_id)
        configs = {c["id"]: c for c in self.push.configs(job_id)} if record is not None else {}
        if record is None or not configs:
            return 0, None  # expired, or every config deleted: nothing left to do for this job
        context = self.push.contexts([job_id])[job_id]
        cursors = self.push.cursors(job_id)
        now = now_ms()
        posted = 0
        next_at: int | None = None if record.terminal else now + FOLLOW_MS
        for config_id, config in configs.items():
            cursor = cursors.get(config_id, Cursor())
            if cursor.retry_at_ms > now:
                next_at = min(next_at or cursor.retry_at_ms, cursor.retry_at_ms)
                continue
            sent, cursor = self._deliver_config(record, context, config, cursor)
            posted += sent
            self.push.save_cursor(job_id, config_id, cursor)
            if cursor.attempts:
                next_at = min(next_at or cursor.retry_at_ms, cursor.retry_at_ms)
            elif record.terminal and self.store.events(job_id, cursor.after, 1):
                next_at = now  # more of the feed is waiting (a long burst): come back at once
        return posted, next_at

    def _deliver_config(self, record: JobRecord, context: str, config: dict[str, Any],
                        cursor: Cursor) -> tuple[int, Cursor]:
        posted = 0
        for event in _latest_per_run(self.store.events(record.id, cursor.after, 1)):
            view = self._view(record, event)
            for body in wire.updates(view, context):
                if not self._post(config, body):
                    attempts = cursor.attempts + 1
                    if attempts >= self.settings.push_max_attempts:
                        log.warning("push to config %s of job %s: giving up on one event after %d attempts",
                                    config["id"], record.id, attempts)
                        return posted, Cursor(after=event.id)
                    return posted, Cursor(after=cursor.after, attempts=attempts,
                                          retry_at_ms=now_ms() + backoff_ms(attempts))
                posted += 1
            cursor = Cursor(after=event.id)
        return posted, cursor

    def _view(self, record: JobRecord, event: Event) -> JobRecord:
        """The job as of one event; results, errors and input requests come from the stored record."""
        if event.state in _REFRESH and record.state is event.state:
            return record
        return dataclasses.replace(record, state=event.state, updated_ms=event.updated_ms,
                                   status_message=event.message, progress=event.progress, total=event.total)

    def _post(self, config: dict[str, Any], body: dict[str, Any]) -> bool:
        try:
            status = post_event(config, body, allow_private=self.settings.push_allow_private,
                                timeout_s=self.settings.push_timeout_s)
        except (OSError, TasksBackendError) as exc:
            log.info("push to %s failed: %s", config.get("url"), type(exc).__name__)
            return False
        if not 200 <= status < 300:
            log.info("push to %s answered %s", config.get("url"), status)
            return False
        return True


def _latest_per_run(events: list[Event]) -> list[Event]:
    """Drop an event when the next one has the same state: a burst of progress becomes its latest."""
    following: list[Event | None] = [*events[1:], None]
    return [e for e, nxt in zip(events, following, strict=False) if nxt is None or nxt.state is not e.state]


def install(app: Celery, settings: Settings) -> None:
    """Run push delivery in this worker's main process, started and stopped with the worker."""

    class PushDelivery(bootsteps.StartStopStep):
        name = "tasks_backend.push"

        def __init__(self, parent: Any, **kwargs: Any) -> None:
            super().__init__(parent, **kwargs)
            self.stop_event = threading.Event()
            self.thread: threading.Thread | None = None

        def start(self, parent: Any) -> None:
            store = RedisStore(connect(settings.redis_url, settings.redis_socket_timeout_s),
                               Keys(settings.key_prefix), max_ttl_ms=int(settings.max_ttl_s * 1000))
            deliverer = PushDeliverer(store, settings)
            self.thread = threading.Thread(target=deliverer.run_forever, args=(self.stop_event,),
                                           name="push-delivery", daemon=True)
            self.thread.start()

        def stop(self, parent: Any) -> None:
            self.stop_event.set()
            if self.thread is not None:
                self.thread.join(timeout=10)

    app.steps["worker"].add(PushDelivery)
