"""`make bench-schedules`: many schedules of `everySeconds: 60`, ticked by two sweeper processes.

Usage: python -m bench.schedules [--quick] [--schedules N] [--seconds S] [--redis-url URL].

Full: 10,000 schedules for 3 minutes; quick: 1,000 for 30 s. Its own Redis (unless `--redis-url`), two
`tasks-backend sweeper` processes, no worker (the jobs made are counted, not run). The schedules' creation
times are spread evenly over a minute, as schedules defined over time are, so that ticks fall evenly
(N/60 a second). Then, from each job the ticks made (its idempotency key names its tick, `createdAt` its
making): duplicates (two jobs for one tick), missed ticks (a tick due in the window, with a margin of 5 s
at its end, that made no job) and lateness (`createdAt` minus the tick) at p50, p99 and max. Targets: 0,
0 and p99 <= 1 s. Schedules are spread over 50 owners, each within the default limit of unfinished jobs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import sys
import time
from collections import Counter
from typing import Any

import redis

from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import EmbeddedRedis
from tasks_backend.service.runtime import build_runtime

from . import procs

OWNERS = 50
PERIOD_S = 60
MARGIN_MS = 5000


def percentile(values: list[int], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def define(settings: Settings, count: int) -> None:
    """`count` schedules whose creation times are spread over the last minute (through the store, which
    takes the anchor a creation would have had)."""
    runtime = build_runtime(settings)
    service = runtime.schedules()
    now = service.store.now_ms()
    period_ms = PERIOD_S * 1000
    for i in range(count):
        spec = service.check({"name": f"s{i}", "operation": "demo.sleep", "params": {"seconds": 0.01},
                              "everySeconds": PERIOD_S})
        anchor = now - (i * period_ms) // count
        service.store.put(f"bench-{i % OWNERS}", spec, generation=secrets.token_hex(8), anchor_ms=anchor,
                          next_ms=spec.next_after(now + 1000, anchor))


def measure(settings: Settings, start_ms: int, end_ms: int, count: int) -> dict[str, Any]:
    runtime = build_runtime(settings)
    keys, client = runtime.store.keys, runtime.store.redis
    made: Counter[tuple[str, int]] = Counter()
    late: list[int] = []
    for o in range(OWNERS):
        owner = f"bench-{o}"
        ids = [str(i) for i in client.zrange(keys.owner_index(owner), 0, -1)]
        pipe = client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hmget(keys.job(job_id), ["created", "idem", "sched"])
        for created, idem, name in pipe.execute():
            if not name or not idem:
                continue
            tick = int(str(idem).rsplit(":", 1)[1])
            made[(f"{owner}/{name}", tick)] += 1
            if start_ms <= tick:  # not the ticks that fell while the sweepers were starting
                late.append(int(created) - tick)
    expected = 0
    missed = 0
    period_ms = PERIOD_S * 1000
    for i in range(count):
        owner = f"bench-{i % OWNERS}"
        schedule = runtime.schedules().store.get(owner, f"s{i}")
        if schedule is None:
            missed += 1
            continue
        first = schedule.anchor_ms + ((start_ms - schedule.anchor_ms) // period_ms + 1) * period_ms
        for tick in range(first, end_ms - MARGIN_MS, period_ms):
            expected += 1
            if made[(f"{owner}/s{i}", tick)] == 0:
                missed += 1
    return {"schedules": count, "ticksExpected": expected, "jobs": sum(made.values()),
            "duplicates": sum(n - 1 for n in made.values() if n > 1), "missed": missed,
            "latenessP50Ms": percentile(late, 0.5), "latenessP99Ms": percentile(late, 0.99),
            "latenessMaxMs": max(late, default=0)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 schedules for 30 s")
    parser.add_argument("--schedules", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--redis-url", default=None, help="a Redis to use (database and a key prefix of the run's own)")
    args = parser.parse_args(argv)
    count = args.schedules or (1000 if args.quick else 10_000)
    seconds = args.seconds or (30.0 if args.quick else 180.0)
    logs = procs.ROOT / "bench" / "results" / f"{time.strftime('%Y%m%d-%H%M%S')}-schedules"
    logs.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        url = args.redis_url
        if url is None:
            server = EmbeddedRedis(appendonly=False).start()
            stack.callback(server.stop)
            url = f"redis://127.0.0.1:{server.port}/0"
        prefix = f"tbsched{secrets.token_hex(3)}"
        settings = Settings(redis_url=url, key_prefix=prefix, queue=prefix, job_modules=("tasks_backend.demo",))
        define(settings, count)
        env = {**os.environ, "REDIS_URL": url, "TASKS_BACKEND_KEY_PREFIX": prefix, "TASKS_BACKEND_QUEUE": prefix,
               "TASKS_BACKEND_JOBS": "tasks_backend.demo", "LOG_FORMAT": "json",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(procs.ROOT), os.environ.get("PYTHONPATH")]))}
        argv_ = [sys.executable, "-m", "tasks_backend.cli", "sweeper"]
        sweepers = [procs.start(f"sweeper-{n}", argv_, env, logs) for n in (1, 2)]
        for sweeper in sweepers:
            stack.callback(sweeper.stop)
        client = redis.Redis.from_url(url)
        start_ms = int(client.time()[0]) * 1000 + 2000  # the sweepers' start-up, as the margin before
        time.sleep(seconds)
        end_ms = int(client.time()[0]) * 1000
        for sweeper in sweepers:
            sweeper.stop()
        result = measure(settings, start_ms, end_ms, count)
        result.update(seconds=seconds, sweepers=2)
        print(json.dumps(result, indent=2))
        ok = result["duplicates"] == 0 and result["missed"] == 0 and result["latenessP99Ms"] <= 1000
        print("targets (0 duplicates, 0 missed, p99 <= 1 s):", "met" if ok else "NOT met")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
