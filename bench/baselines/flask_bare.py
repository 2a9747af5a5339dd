"""The bare Flask routes the product is compared with, served by the same gunicorn command.

- `GET /hash/<id>`: one HGETALL of the product's own job hash for that id (same data, no checks).
- `POST /jobs`: `apply_async` of the bare no-op task; 202 with its id.
- `GET /jobs/<id>`: one GET of the task's stored Celery result; its status.
"""

from __future__ import annotations

import json
import os

import redis
from flask import Flask, jsonify

from .celery_bare import make_app


def create_app() -> Flask:
    app = Flask("bench_bare")
    client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"], decode_responses=True)
    results = redis.Redis.from_url(os.environ["BENCH_RESULT_URL"], decode_responses=True)
    prefix = os.environ.get("BENCH_KEY_PREFIX", "tb")
    celery = make_app(os.environ["BENCH_BROKER_URL"], None)
    noop = celery.tasks["bench.bare_noop"]

    @app.get("/hash/<job_id>")
    def poll_hash(job_id: str):  # type: ignore[no-untyped-def]
        raw = client.hgetall(f"{prefix}:{{{job_id}}}:job")
        if not raw:
            return jsonify({"error": "not found"}), 404
        return jsonify(raw)

    @app.post("/jobs")
    def submit():  # type: ignore[no-untyped-def]
        result = noop.apply_async()
        return jsonify({"taskId": result.id, "status": "working"}), 202

    @app.get("/jobs/<job_id>")
    def poll(job_id: str):  # type: ignore[no-untyped-def]
        raw = results.get(f"celery-task-meta-{job_id}")
        status = json.loads(raw)["status"] if raw else "PENDING"
        return jsonify({"taskId": job_id, "status": status})

    return app
