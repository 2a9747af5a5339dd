"""`make bench-replicas`: what a submit that waits for one replica (`TASKS_BACKEND_SUBMIT_REPLICAS=1`) costs.

Usage: python -m bench.replicas [--quick]. A primary (AOF on, as in production) and one replica run on
loopback; two product web servers share them, alike but for the setting (0 and 1). The same wrk load
submits to each in alternating runs, and a single in-process caller times the submit round trip both
ways. Every figure is a ratio of the waiting side over the other, in the same run; results go to
bench/results/<time>-replicas/.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import redis

from tasks_backend.config import Settings
from tasks_backend.embedded import EmbeddedRedis, die_with_parent, free_port, redis_server_binary
from tasks_backend.runtime import build_runtime

from . import procs
from .load import Load, Run
from .measures import Plan, Row, fixed, median, paired, percentile, warm
from .report import markdown, table
from .run import FULL, QUICK, ROOT, WEB_WORKERS, machine

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


def round_trips(env: dict[str, str], replicas: str, count: int) -> list[float]:
    """Milliseconds of `count` in-process submits, one at a time."""
    runtime = build_runtime(Settings.from_env({**env, "TASKS_BACKEND_SUBMIT_REPLICAS": replicas}))
    out = []
    for _ in range(count):
        started = time.perf_counter()
        runtime.service.submit("bench", "bench.noop", {})
        out.append((time.perf_counter() - started) * 1000)
    return out


def one_caller(env: dict[str, str], plan: Plan, count: int) -> Row:
    ours: list[float] = []
    theirs: list[float] = []
    for rep in range(plan.reps):
        order = [(ours, "1"), (theirs, "0")]
        for out, replicas in order if rep % 2 == 0 else reversed(order):
            out.extend(round_trips(env, replicas, count))
    # Submits per second of one caller, so that the ratio reads like the HTTP row's (below 1 = slower).
    product, baseline = 1000 / median(ours), 1000 / median(theirs)
    return Row("submit, one caller in process", "submits/s", "-", product, baseline, product / baseline,
               p50_ms=median(ours), p99_ms=percentile(ours, 0.99), base_p50_ms=median(theirs),
               base_p99_ms=percentile(theirs, 0.99))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short runs: under a minute")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    stamp = time.strftime("%Y%m%d-%H%M%S")
    logs = ROOT / "bench" / "results" / f"{stamp}-replicas"
    (logs / "primary").mkdir(parents=True)
    started = time.monotonic()
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

        rows.append(paired("submit POST /v1/jobs, WAIT 1 / none", "req/s", "-", 0.0, plan,
                           lambda: submits("wait"), lambda: submits("nowait"), lambda r: r.rps))
        rows[-1].passed = None  # a price to know, not a target to meet
        rows.append(one_caller(env, plan, 200 if args.quick else 2000))
        client.delete(queue)
    finally:
        for proc in running:
            proc.stop()
        replica.terminate()
        replica.wait(10)
        primary.stop()
    header = (f"tasks-backend WAIT 1 on submit, {'quick' if args.quick else 'full'} run {stamp}, "
              f"{time.monotonic() - started:.0f} s; {machine()}")
    print(header)
    print(table(rows))
    (logs / "table.md").write_text(header + "\n\n" + markdown(rows) + "\n")
    (logs / "results.json").write_text(json.dumps({"header": header, "rows": [r.__dict__ for r in rows]}, indent=2))
    print(f"\nlogs and results: {logs.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
