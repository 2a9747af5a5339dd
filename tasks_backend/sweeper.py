"""The sweeper: the safety net under at-least-once delivery.

It republishes jobs stuck in `queued` (a publish that was lost, or a message lost in the broker's
fetch window), requeues jobs whose worker died (lease lapsed), fails jobs that used up their attempts,
and finishes cancellations whose worker died. Jobs past their TTL simply expire in Redis; a worker
still running one finds it gone at its next write and stops. Every decision is one Lua script, so
any number of sweepers may run at once; a short lock only saves them from duplicate work.
"""

from __future__ import annotations

import logging
import threading

from .config import Settings
from .dispatch import Dispatcher
from .domain import now_ms
from .errors import DispatchUnavailable, ServiceUnavailable
from .stats import JobStats
from .store import RedisStore

log = logging.getLogger(__name__)


class Sweeper:
    def __init__(self, store: RedisStore, dispatcher: Dispatcher, settings: Settings, batch: int = 500) -> None:
        self.store, self.dispatcher, self.settings, self.batch = store, dispatcher, settings, batch

    def sweep_once(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        interval_ms = int(self.settings.sweep_interval_s * 1000)
        if not self.store.try_lock("sweep", max(interval_ms // 2, 100)):
            return counts
        now = now_ms()
        for job_id in self.store.due_for_sweep(now, self.batch):
            action, when, operation = self.store.sweep_one(
                job_id, now_ms=now, grace_ms=int(self.settings.queued_grace_s * 1000),
                max_attempts=self.settings.max_attempts,
                abandoned_error={"message": f"Gave up after {self.settings.max_attempts} attempts: the worker "
                                            "running it was lost each time.", "type": "WorkerLost"})
            if action == "republish" and self._orphan(job_id):
                action = "orphan"
            counts[action] = counts.get(action, 0) + 1
            if action == "republish":
                try:
                    self.dispatcher.publish(job_id, operation)
                except DispatchUnavailable:
                    when = now + interval_ms
            self.store.reschedule_sweep(job_id, when if action in ("republish", "later") else None)
        JobStats(self.store).sweeper_actions(counts)
        if counts:
            log.info("sweep: %s", counts)
        return counts

    def _orphan(self, job_id: str) -> bool:
        """A job written by a submit that then lost its idempotency race, and whose submitter died
        before removing it: nobody holds its handle, and running it would run the request twice."""
        record = self.store.get(job_id)
        if record is None or record.idempotency_key is None:
            return False
        holder = self.store.idempotency_value(record.owner, record.idempotency_key)
        if holder is not None and holder.startswith(record.id):
            return False
        self.store.discard(job_id)
        return True

    def run_forever(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.sweep_once()
            except ServiceUnavailable:
                log.warning("sweep skipped: Redis or the broker is unreachable")
            except Exception:
                log.exception("sweep failed")
            stop.wait(self.settings.sweep_interval_s)
