"""Where the commands of a Redis Cluster store go: per node and per job, and what the global keys add.

Runs `--jobs` no-op jobs (submitted in-process, run by an in-process worker) on a three-primary cluster on
loopback ports, with an embedded Redis as the broker, then reads each node's command counters. The node that
serves the sweep schedule (a global key) does its third of the per-job work plus the schedule's commands;
the table says how many commands per job each node served, and which of them were the schedule's.

    python -m bench.cluster_load [--jobs 2000]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import redis
from celery.contrib.testing.worker import start_worker

from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import EmbeddedRedis
from tasks_backend.devtools.embedded_cluster import LocalCluster
from tasks_backend.model.domain import TERMINAL_STATES
from tasks_backend.service.runtime import build_runtime
from workers.celery_app import create_celery


def counters(client: redis.Redis) -> dict[str, int]:
    stats: Any = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(row["calls"]) for name, row in stats.items()}


def measure(jobs: int) -> str:
    cluster, broker = LocalCluster().start(), EmbeddedRedis(appendonly=False).start()
    try:
        settings = Settings(redis_url=cluster.url, broker_url=f"redis://127.0.0.1:{broker.port}/0",
                            key_prefix="bench", queue="bench-cluster", rate_limit=0, max_active_jobs=0,
                            auth_failure_limit=0)
        runtime = build_runtime(settings)
        store: Any = runtime.store.redis
        sweep_port = store.get_node_from_key(runtime.store.keys.sweep()).port
        nodes = {n.port: redis.Redis(port=n.port, decode_responses=True) for n in cluster.nodes}
        with start_worker(create_celery(settings), pool="threads", concurrency=4, perform_ping_check=False,
                          loglevel="WARNING", shutdown_timeout=15):
            runtime.service.submit("bench", "demo.sleep", {"seconds": 0})  # scripts loaded, connections made
            for client in nodes.values():
                client.config_resetstat()
            started = time.monotonic()
            # Callers of their own, as in a real deployment: each owner's keys are one slot.
            ids = [runtime.service.submit(f"bench-{n % 64}", "demo.sleep", {"seconds": 0, "steps": 1})[0].id
                   for n in range(jobs)]
            # Finished jobs leave the sweep schedule: one ZCARD a poll (left out of the counts below).
            deadline = time.monotonic() + 60 + jobs / 10
            while store.zcard(runtime.store.keys.sweep()) and time.monotonic() < deadline:
                time.sleep(0.2)  # a report's poll, not a synchronisation between parts under test
            elapsed = time.monotonic() - started
            calls = {port: counters(client) for port, client in nodes.items()}
        unfinished = [r for r in runtime.store.get_many(ids) if r is None or r.state not in TERMINAL_STATES]
        if unfinished:
            raise RuntimeError(f"{len(unfinished)} jobs did not finish")
        rows = ["| node | commands per job | scripts per job |", "| --- | --- | --- |"]
        for port, node_calls in calls.items():
            total = sum(v for k, v in node_calls.items()
                        if not k.startswith(("info", "config", "cluster", "command", "zcard")))
            label = f"{port} (the sweep schedule's)" if port == sweep_port else str(port)
            rows.append(f"| {label} | {total / jobs:.1f} | {node_calls.get('evalsha', 0) / jobs:.1f} |")
        return (f"{jobs} jobs in {elapsed:.1f} s; a script and each command it runs count one each\n\n"
                + "\n".join(rows))
    finally:
        broker.stop()
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    print(measure(parser.parse_args().jobs))


if __name__ == "__main__":
    main()
