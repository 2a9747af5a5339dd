"""`/healthz` and `/metrics`: per-app Prometheus registry, no module-level collectors."""

from __future__ import annotations

import time
from collections.abc import Iterator

from flask import Blueprint, Flask, Response, current_app, g, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tasks_backend.runtime import Runtime

bp = Blueprint("observability", __name__)


class _BacklogCollector(Collector):
    """Read at scrape time from Redis, so every web process reports the same figures."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[GaugeMetricFamily]:
        store = self.runtime.store
        try:
            due = store.redis.zcard(store.keys.sweep())
        except Exception:
            return
        yield GaugeMetricFamily("tasks_backend_tracked_jobs", "Jobs queued or running that the sweeper watches",
                                value=float(due))


def install(app: Flask, runtime: Runtime) -> None:
    registry = CollectorRegistry(auto_describe=True)
    requests = Counter("tasks_backend_http_requests", "HTTP requests", ["endpoint", "method", "status"],
                       registry=registry)
    latency = Histogram("tasks_backend_http_request_seconds", "HTTP request latency", ["endpoint"],
                        registry=registry)
    registry.register(_BacklogCollector(runtime))
    app.extensions["tasks_backend_metrics"] = registry

    @app.before_request
    def _start() -> None:
        g.started = time.perf_counter()

    @app.after_request
    def _count(response: Response) -> Response:
        endpoint = request.endpoint or "unknown"
        requests.labels(endpoint, request.method, str(response.status_code)).inc()
        if "started" in g:
            latency.labels(endpoint).observe(time.perf_counter() - g.started)
        return response


@bp.get("/healthz")
def healthz() -> tuple[Response, int]:
    runtime: Runtime = current_app.extensions["tasks_backend"]
    checks = {"redis": runtime.store.ping(), "broker": runtime.dispatcher.ping()}
    ok = all(checks.values())
    response = jsonify({"status": "ok" if ok else "unavailable", "checks": checks})
    if not ok:
        response.headers["Retry-After"] = "5"
    return response, 200 if ok else 503


@bp.get("/metrics")
def metrics() -> Response:
    registry: CollectorRegistry = current_app.extensions["tasks_backend_metrics"]
    return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)
