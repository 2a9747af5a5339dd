"""`make bench-replicas`: what a submit that waits for one replica (`TASKS_BACKEND_SUBMIT_REPLICAS=1`) costs.

Usage: python -m bench.replicas [--quick]. A primary (AOF on, as in production) and one replica run on
loopback; two product web servers share them, alike but for the setting (0 and 1). One caller submits
to both in turn, request by request, over HTTP and in process (the round trip the `WAIT` rides in); then
the same wrk load submits to each in alternating runs. Every figure is a ratio of the waiting side over
the other, in the same run; results go to bench/results/<time>-replicas/.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import redis

from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import EmbeddedRedis, free_port, redis_server_binary
from tasks_backend.service.runtime import build_runtime
from tasks_backend.serving.processes import die_with_parent

from . import procs
from .load import Load, Run
from .measures import Row, fixed, median, paired, percentile, warm
from .report import save
from .run import ROOT, WEB_WORKERS, machine, side_run

SIDES = {"wait": "1", "nowait": "0"}


def start_replica(primary_port: int, data: Path) -> subprocess.Popen[bytes]:
    data.mkdir(parents=True)
    port = free_port()
    argv = [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--save", "",
            "--appendonly", "yes", "--appendfsync", "everysec", "--replicaof", "127.0.0.1", str(primary_port),
            "--logfile", str(data / "redis.log")]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)


def wait_replica_online(primary: redis.Redis, replica: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while primary.info("replication").get("slave0", {}).get("state") != "online":
        if replica.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the replica did not come online; see its redis.log")
        time.sleep(0.05)


def interleaved(name: str, wait: Callable[[], object], nowait: Callable[[], object], pairs: int) -> Row:
    """Time `pairs` calls of each side one after the other, alternating which goes first: both sides of a
    pair see the same moment of a shared machine, so a neighbour's burst moves both, not the ratio."""
    ours: list[float] = []
    theirs: list[float] = []
    for i in range(pairs):
        order = [(ours, wait), (theirs, nowait)]
        for out, call in order if i % 2 == 0 else reversed(order):
            started = time.perf_counter()
            call()
            out.append((time.perf_counter() - started) * 1000)
    # Calls per second of one caller, so that the ratio reads like the throughput row's (below 1 = slower).
    product, baseline = 1000 / median(ours), 1000 / median(theirs)
    return Row(name, "submits/s", "-", product, baseline, product / baseline, p50_ms=median(ours),
               p99_ms=percentile(ours, 0.99), base_p50_ms=median(theirs), base_p99_ms=percentile(theirs, 0.99))


def main(argv: list[str] | None = None) -> int:
    this = side_run(argv, __doc__, "replicas")
    plan, logs = this.plan, this.logs
    (logs / "primary").mkdir()
    primary = EmbeddedRedis(appendonly=True, data_dir=str(logs / "primary")).start()
    replica = start_replica(primary.port, logs / "replica")
    token = secrets.token_urlsafe(16)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": f"redis://127.0.0.1:{primary.port}/0",
           "TASKS_BACKEND_JOBS": "bench.jobs", "TASKS_BACKEND_TOKENS": f"bench:{token}",
           "TASKS_BACKEND_RATE_LIMIT": "1000000000", "TASKS_BACKEND_MAX_ACTIVE_JOBS": "1000000000"}
    client = redis.Redis(port=primary.port)
    running: list[procs.Proc] = []
    rows: list[Row] = []
    try:
        wait_replica_online(client, replica)
        loads: dict[str, Load] = {}
        for side, replicas in SIDES.items():
            port = free_port()
            proc = procs.start(f"web-{side}", [str(ROOT / ".venv/bin/tasks-backend"), "web", "--workers",
                                               str(WEB_WORKERS), "--threads", "1", "--bind", f"127.0.0.1:{port}"],
                               {**env, "TASKS_BACKEND_SUBMIT_REPLICAS": replicas}, logs)
            running.append(proc)
            procs.wait_http(proc, f"http://127.0.0.1:{port}/healthz")
            loads[side] = Load(f"http://127.0.0.1:{port}", method="POST", path="/v1/jobs",
                               body=json.dumps({"operation": "bench.noop", "params": {}}),
                               headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        warm(plan, *loads.values())
        queue = Settings.from_env(env).queue

        def submits(side: str) -> Run:
            run = fixed(loads[side], plan)()
            client.delete(queue)  # no worker runs them: keep the queue from growing across runs
            return run

        pairs = 300 if this.quick else 3000
        services = {side: build_runtime(Settings.from_env({**env, "TASKS_BACKEND_SUBMIT_REPLICAS": r})).service
                    for side, r in SIDES.items()}
        rows.append(interleaved("submit round trip, one caller in process",
                                lambda: services["wait"].submit("bench", "bench.noop", {}),
                                lambda: services["nowait"].submit("bench", "bench.noop", {}), pairs))
        body = {"operation": "bench.noop", "params": {}}
        with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=10) as http:
            rows.append(interleaved("submit POST /v1/jobs, one caller",
                                    lambda: http.post(f"{loads['wait'].url}/v1/jobs", json=body).raise_for_status(),
                                    lambda: http.post(f"{loads['nowait'].url}/v1/jobs", json=body).raise_for_status(),
                                    pairs))
        client.delete(queue)
        row = paired("submit POST /v1/jobs, 32 connections", "req/s", "-", 0.0, plan,
                     lambda: submits("wait"), lambda: submits("nowait"), lambda r: r.rps)
        row.passed = None  # a price to know, not a target to meet
        ratios = row.samples["ratio"]
        row.note = f"pairs {min(ratios):.2f}x to {max(ratios):.2f}x"
        rows.append(row)
    finally:
        for proc in running:
            proc.stop()
        replica.terminate()
        replica.wait(10)
        primary.stop()
    header = f"tasks-backend WAIT 1 on submit, {this.named()}; {machine()}"
    save(logs, header, rows)
    print(f"\nlogs and results: {logs.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
