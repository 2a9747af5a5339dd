"""`make bench-scaling`: no-op jobs per second with 1, 2 and 4 worker processes, the product's runner side
by side with bare Celery at the same counts, on each broker (the store's Redis, and RabbitMQ).

Usage: python -m bench.scaling [--quick] [--jobs N] [--reps N] [--amqp-url URL].

A worker process here is one Celery worker with one pool process (`--pool prefork --concurrency 1`),
as when workers are spread over hosts; both sides run the same flags, acks_late, prefetch 1, and on
RabbitMQ the same quorum queue type with publisher confirms. Each cell fills the queue with N no-op
jobs behind one "hold" job per worker, starts the workers, waits until every one of them holds its hold
job (so start-up is not measured), opens the gate, and times the drain between 90% and 10% of N left
(`measures.drain_rate`). Sides alternate which goes first. RabbitMQ runs in a vhost of the run's own
(deleted at the end) where `rabbitmqctl` can make one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kombu import Connection

from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import EmbeddedRedis
from tasks_backend.service.runtime import build_runtime

from . import procs
from .baselines.celery_bare import QUEUE as BARE_QUEUE
from .baselines.celery_bare import make_app
from .measures import Row, drain_rate, median
from .report import save

ROOT = procs.ROOT
PRODUCT_PY = str(ROOT / ".venv" / "bin" / "python")
COUNTS = (1, 2, 4)
QUEUE = "bench_scaling"
DEFAULT_AMQP = os.environ.get("BENCH_AMQP_URL") or "amqp://guest:guest@127.0.0.1:5672//"


class Depth:
    """Messages ready in a queue, asked of the broker (a passive declare) on one kept connection."""

    def __init__(self, broker_url: str, queue: str) -> None:
        self.conn = Connection(broker_url)
        self.queue = queue
        self.channel: Any = None

    def __call__(self) -> int:
        if self.channel is None:
            self.channel = self.conn.channel()
        try:
            return int(self.channel.queue_declare(queue=self.queue, passive=True)[1])
        except self.conn.channel_errors:  # Redis has no key for an empty list: "not found"
            self.channel = None
            return 0

    def close(self) -> None:
        self.conn.release()


@dataclass
class Side:
    name: str
    broker: str
    env: dict[str, str]
    publish: Callable[[], None]
    hold: Callable[[str], None]
    depth: Depth
    worker_argv: Callable[[str], list[str]]


def product_side(broker: str, redis_url: str, broker_url: str | None, base_env: dict[str, str]) -> Side:
    env = {**base_env, "REDIS_URL": redis_url, "TASKS_BACKEND_JOBS": "bench.jobs", "TASKS_BACKEND_QUEUE": QUEUE,
           "TASKS_BACKEND_KEY_PREFIX": "bscale", "TASKS_BACKEND_RATE_LIMIT": "1000000000",
           "TASKS_BACKEND_MAX_ACTIVE_JOBS": "1000000000"}
    if broker_url:
        env["CELERY_BROKER_URL"] = broker_url
    service = build_runtime(Settings.from_env(env)).service

    def argv(hostname: str) -> list[str]:
        return [str(ROOT / ".venv/bin/tasks-backend"), "worker", "--pool", "prefork", "--concurrency", "1",
                "--without-mingle", "--without-gossip", "--hostname", hostname]

    return Side("product", broker, env, lambda: service.submit("bench", "bench.noop", {}) and None,
                lambda gate: service.submit("bench", "bench.hold", {"gate": gate}) and None,
                Depth(broker_url or redis_url, QUEUE), argv)


def bare_side(broker: str, broker_url: str, result_url: str, base_env: dict[str, str]) -> Side:
    env = {**base_env, "BENCH_BROKER_URL": broker_url, "BENCH_RESULT_URL": result_url}
    app = make_app(broker_url, None)
    noop, hold = app.tasks["bench.bare_noop"], app.tasks["bench.bare_hold"]

    def argv(hostname: str) -> list[str]:
        return [PRODUCT_PY, "-m", "celery", "-A", "bench.baselines.celery_bare", "worker", "-Q", BARE_QUEUE,
                "--pool", "prefork", "--concurrency", "1", "--without-mingle", "--without-gossip",
                "--loglevel", "WARNING", "--hostname", hostname]

    return Side("bare Celery", broker, env, lambda: noop.apply_async() and None,
                lambda gate: hold.apply_async(args=[gate]) and None, Depth(broker_url, BARE_QUEUE), argv)


def cell(side: Side, workers: int, jobs: int, logs: Path) -> float:
    """Jobs/s that `workers` worker processes take off a queue of `jobs` no-op jobs."""
    gate = logs / f"gate-{secrets.token_hex(4)}"
    for _ in range(workers):
        side.hold(str(gate))
    for _ in range(jobs):
        side.publish()
    tag = f"{side.name.split()[-1].lower()}-{side.broker}-{workers}"
    running = [procs.start(f"{tag}-{i}", side.worker_argv(f"{tag}-{i}-{os.getpid()}@%h"), side.env, logs)
               for i in range(workers)]
    try:
        _wait(lambda: len(list(logs.glob(f"{gate.name}.started.*"))) == workers, 180, f"{tag}: workers to hold")
        rate, _ = drain_rate(side.depth, jobs, gate.touch)
        _wait(lambda: side.depth() == 0, 120, f"{tag}: the queue to empty")
    finally:
        for proc in running:
            proc.stop()
    return rate


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


@contextlib.contextmanager
def rabbit_vhost(url: str) -> Iterator[str]:
    from tests.support.rabbit import session_vhost  # the same vhost-per-run helper the tests use

    with session_vhost(url) as vhost_url:
        yield vhost_url


def run(jobs: int, reps: int, amqp_url: str, logs: Path) -> list[Row]:
    rows: list[Row] = []
    base_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    redis = EmbeddedRedis(appendonly=True, data_dir=str(logs / "redis")).start()
    base = f"redis://127.0.0.1:{redis.port}"
    try:
        with rabbit_vhost(amqp_url) as vhost:
            brokers = {"Redis": (None, f"{base}/1"), "RabbitMQ": (vhost, vhost)}
            for broker, (product_broker, bare_broker) in brokers.items():
                sides = [product_side(broker, f"{base}/0", product_broker, base_env),
                         bare_side(broker, bare_broker, f"{base}/2", base_env)]
                rates: dict[tuple[str, int], list[float]] = {}
                for workers in COUNTS:
                    for rep in range(reps):
                        order = sides if (rep + workers) % 2 else list(reversed(sides))
                        for side in order:
                            rate = cell(side, workers, jobs, logs)
                            rates.setdefault((side.name, workers), []).append(rate)
                            print(f"  {broker}, {workers} worker(s), {side.name}: {rate:,.0f} jobs/s",
                                  file=sys.stderr, flush=True)
                    ours, theirs = median(rates[("product", workers)]), median(rates[("bare Celery", workers)])
                    # Each rep's two sides ran back to back: the median of their ratios cancels slow drift.
                    paired = median([a / b for a, b in zip(rates[("product", workers)], rates[("bare Celery", workers)],
                                                           strict=True)])
                    scale = (f"{ours / median(rates[('product', 1)]):.2f}x / "
                             f"{theirs / median(rates[('bare Celery', 1)]):.2f}x of 1 worker")
                    rows.append(Row(f"no-op jobs, {workers} worker process{'es' if workers > 1 else ''}, {broker}",
                                    "jobs/s", "side by side", ours, theirs, paired, None,
                                    note=f"product / bare: {scale}",
                                    samples={"product": rates[("product", workers)],
                                             "baseline": rates[("bare Celery", workers)]}))
                for side in sides:
                    side.depth.close()
    finally:
        redis.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: few jobs per cell")
    parser.add_argument("--jobs", type=int, default=None, help="no-op jobs per cell (default 3000; quick 400)")
    parser.add_argument("--reps", type=int, default=1, help="runs per cell (the median is reported)")
    parser.add_argument("--amqp-url", default=DEFAULT_AMQP, help="RabbitMQ (default: BENCH_AMQP_URL or local)")
    args = parser.parse_args(argv)
    jobs = args.jobs or (400 if args.quick else 3000)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    logs = ROOT / "bench" / "results" / f"{stamp}-scaling"
    (logs / "redis").mkdir(parents=True)
    started, load_before = time.monotonic(), os.getloadavg()[0]
    rows = run(jobs, args.reps, args.amqp_url, logs)
    # Other work on the machine moves these figures more than anything measured: say how busy it was.
    header = (f"tasks-backend scaling benchmark, {jobs} jobs per cell, {args.reps} rep(s), {stamp}, "
              f"{time.monotonic() - started:.0f} s; {os.cpu_count()} cores, load average {load_before:.1f} before, "
              f"{os.getloadavg()[0]:.1f} after")
    save(logs, header, rows)
    print(f"\nlogs and results: {logs.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
