"""`/healthz`, `/readyz` and `/metrics`: per-app Prometheus registry, no module-level collectors.

Job figures come from Redis (what every worker and sweeper recorded, see `tasks_backend.running.stats`) and
from the broker (queue depth), read at scrape time, so every web process reports the same numbers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from flask import Blueprint, Flask, Response, current_app, jsonify
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from tasks_backend.running.dispatch import CeleryDispatcher
from tasks_backend.running.stats import JobStats
from tasks_backend.service.runtime import Runtime

from .protocol import Adapter

bp = Blueprint("observability", __name__)
log = logging.getLogger(__name__)


def queue_depth(runtime: Runtime) -> int | None:
    """Messages waiting in the job queue, asked of the broker itself (any kombu transport)."""
    dispatcher = runtime.dispatcher
    if not isinstance(dispatcher, CeleryDispatcher):
        return None
    try:
        with dispatcher.app.connection_for_read() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
            try:
                channel: Any = conn.default_channel
                _, count, _ = channel.queue_declare(queue=runtime.settings.queue, passive=True)
            except conn.channel_errors:
                return 0  # Redis has no key for an empty queue; a passive declare calls that "not found"
            return int(count)
    except Exception as exc:
        log.warning("queue depth unavailable: %s", type(exc).__name__)
        return None


class _JobCollector(Collector):
    """Read at scrape time from Redis and the broker."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[Metric]:
        store = self.runtime.store
        try:
            due = store.tracked()
            snapshot = JobStats(store).snapshot()
        except Exception as exc:  # a scrape during a Redis outage reports what it can, not a 500
            log.warning("job metrics unavailable: %s", type(exc).__name__)
        else:
            yield GaugeMetricFamily("tasks_backend_tracked_jobs",
                                    "Jobs queued or running that the sweeper watches", value=float(due))
            outcomes = CounterMetricFamily("tasks_backend_jobs_finished",
                                           "Jobs a worker brought to an end, by operation and outcome",
                                           labels=["operation", "outcome"])
            for (operation, outcome), count in sorted(snapshot.outcomes.items()):
                outcomes.add_metric([operation, outcome], count)
            yield outcomes
            durations = HistogramMetricFamily("tasks_backend_job_duration_seconds",
                                              "Time from submit to a terminal state, by operation",
                                              labels=["operation"])
            for operation, hist in sorted(snapshot.durations.items()):
                durations.add_metric([operation], hist.buckets, hist.total)
            yield durations
            yield GaugeMetricFamily("tasks_backend_jobs_parked", "Jobs waiting for input, holding no worker",
                                    value=float(snapshot.parked))
            sweeps = CounterMetricFamily("tasks_backend_sweeper_actions",
                                         "Jobs the sweeper handled, by action", labels=["action"])
            for action, count in sorted(snapshot.sweeps.items()):
                sweeps.add_metric([action], count)
            yield sweeps
            yield GaugeMetricFamily("tasks_backend_jobs_running", "Jobs a worker runs now",
                                    value=float(snapshot.running))
            pushes = CounterMetricFamily("tasks_backend_push_deliveries",
                                         "Push and webhook POSTs, by outcome (delivered, failed; given_up: events "
                                         "dropped for a subscription after its last attempt)", labels=["outcome"])
            for outcome, count in sorted(snapshot.push.items()):
                pushes.add_metric([outcome], count)
            yield pushes
            yield CounterMetricFamily("tasks_backend_audit_write_failures",
                                      "Audit entries not written (Redis refused or could not take them; each is "
                                      "logged)", value=snapshot.audit.get("write_failures", 0.0))
        yield from self._gate()
        depth = queue_depth(self.runtime)
        if depth is not None:
            gauge = GaugeMetricFamily("tasks_backend_queue_depth", "Messages waiting in the broker queue",
                                      labels=["queue"])
            gauge.add_metric([self.runtime.settings.queue], float(depth))
            yield gauge

    def _gate(self) -> Iterator[Metric]:
        """The dispatch gate's figures: the backlog in Redis before the broker, and the workers alive."""
        stats = JobStats(self.runtime.store)
        try:
            now = stats.redis_now_ms()
            figures = self.runtime.store.gate_figures(self.runtime.service.admission.call(), now)
            oldest = stats.oldest_waiting_s(figures.oldest_in_flight, now, figures.oldest_bypassed)
        except Exception as exc:
            log.warning("dispatch gate metrics unavailable: %s", type(exc).__name__)
            return
        for name, text, value in (
                ("jobs_held", "Jobs the dispatch gate holds until a worker slot or their concurrency value has room",
                 figures.held),
                ("jobs_delayed", "Jobs waiting for their runAt or delay (and retries for their backoff)",
                 figures.delayed),
                ("jobs_in_flight", "Jobs handed to the broker and not finished (waiting there or running)",
                 figures.in_flight),
                ("backlog_oldest_seconds", "Seconds the longest-waiting job handed to the broker has waited "
                 "for a worker (0: none waits)", oldest),
                ("workers_alive", "Workers whose published slots are current (each publishes every 10 s)",
                 figures.workers),
                ("worker_slots", "Job slots of the workers alive", figures.slots)):
            yield GaugeMetricFamily(f"tasks_backend_{name}", text, value=float(value))


def install(app: Flask, runtime: Runtime) -> None:
    """Job metrics only, read from Redis at scrape time. Per-request counters are left to the proxy
    in front: under several gunicorn processes, each with its own registry, every scrape would see a
    different process's counts."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_JobCollector(runtime))
    app.extensions["tasks_backend_metrics"] = registry


ADAPTER = Adapter("observability", bp, public_paths=frozenset({"/healthz", "/readyz"}), install=install)


@bp.get("/healthz")
def healthz() -> tuple[Response, int]:
    runtime: Runtime = current_app.extensions["tasks_backend"]
    checks = {"redis": runtime.store.ping(), "broker": runtime.dispatcher.ping()}
    ok = all(checks.values())
    response = jsonify({"status": "ok" if ok else "unavailable", "checks": checks})
    if not ok:
        response.headers["Retry-After"] = "5"
    return response, 200 if ok else 503


def _probe(check: Callable[[], Any]) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        ok = bool(check())
        error = None if ok else "no answer"
    except Exception as exc:
        ok, error = False, type(exc).__name__
    out: dict[str, Any] = {"ok": ok, "latencyMs": round(1000 * (time.perf_counter() - started), 1)}
    if error:
        out["error"] = error
    return out


@bp.get("/readyz")
def readyz() -> tuple[Response, int]:
    """Ready to take jobs: the job store and the broker each answer. Says which one does not."""
    runtime: Runtime = current_app.extensions["tasks_backend"]
    checks = {"redis": _probe(runtime.store.redis.ping), "broker": _probe(runtime.dispatcher.ping)}
    failing = [name for name, result in checks.items() if not result["ok"]]
    response = jsonify({"status": "ready" if not failing else "unavailable", "failing": failing,
                        "checks": checks})
    if failing:
        response.headers["Retry-After"] = "5"
    return response, 503 if failing else 200


@bp.get("/metrics")
def metrics() -> Response:
    registry: CollectorRegistry = current_app.extensions["tasks_backend_metrics"]
    return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)
