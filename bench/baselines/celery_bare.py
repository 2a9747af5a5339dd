"""A bare Celery app with one no-op task: what a hand-written Flask + Celery service would run.

Same broker (the bench's Redis), same delivery settings as the product's runner: acks_late,
prefetch 1, JSON. Its result goes to the Redis result backend, so a poll can see it finish.
Start a worker with `celery -A bench.baselines.celery_bare worker -Q bench_bare ...`.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

QUEUE = "bench_bare"


def make_app(broker_url: str, result_backend: str | None) -> Celery:
    app = Celery("bench_bare", set_as_current=False)
    app.conf.update(
        broker_url=broker_url,
        result_backend=result_backend,
        task_default_queue=QUEUE,
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        result_expires=3600,
        broker_connection_retry_on_startup=True,
    )

    if broker_url.startswith("amqp"):
        # What the product runs on RabbitMQ (a quorum queue, every publish confirmed), so the two compare
        # like for like: bench/scaling.py.
        app.conf.update(task_default_queue_type="quorum", broker_transport_options={"confirm_publish": True},
                        worker_detect_quorum_queues=True)

    # Not shared: bench/scaling.py makes an app per broker in one process.
    @app.task(name="bench.bare_noop", shared=False)
    def noop() -> dict[str, Any]:
        return {"ok": True}

    @app.task(name="bench.bare_hold", shared=False)
    def hold(gate: str) -> dict[str, Any]:
        from bench.jobs import hold_until

        hold_until(gate)
        return {"ok": True}

    return app


def __getattr__(name: str) -> Any:
    """`celery -A` reads `app`, built from the environment when first asked for (not at import).

    The worker stores results; the web side (see flask_bare) publishes without a result backend, so
    no result subscription is opened per call, and reads the stored result with one GET.
    """
    if name == "app":
        return make_app(os.environ["BENCH_BROKER_URL"], os.environ.get("BENCH_RESULT_URL"))
    raise AttributeError(name)
