"""`make bench`: start Redis, the product, the baselines and their workers; measure; print the table.

Usage: python -m bench.run [--quick] [--only NAME ...]. Every figure is a ratio against a baseline
measured in the same run, on the same Redis server, under the same gunicorn settings and the same
load generator (wrk). Results also go to bench/results/ (JSON and a Markdown table).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import platform
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import redis

from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import EmbeddedRedis, free_port, redis_server_binary
from tasks_backend.service.runtime import Runtime, build_runtime

from . import dispatch, fill, procs, protocols, queues
from .baselines.celery_bare import QUEUE as BARE_QUEUE
from .load import Load
from .measures import (
    Meter,
    Plan,
    Row,
    calls_note,
    cpu_note,
    drain_rate,
    fixed,
    flow,
    median,
    paired,
    percentile,
    quiet,
    warm,
)
from .postgres import Postgres
from .protocols import SUBMIT_BODY, http_flow, mcp_flow
from .report import markdown, table

ROOT = procs.ROOT
PRODUCT_PY = str(ROOT / ".venv" / "bin" / "python")
BASELINE_PY = str(ROOT / ".venv-bench" / "bin" / "python")
WEB_WORKERS = 4
#: A smoke run of the whole harness: one short run per side, small counts, no warm-up.
QUICK = Plan(seconds=1, reps=1, connections=32, threads=2, flow_connections=16, warm_s=0, mcp_seconds=2,
             runner_jobs=600, runner_reps=1, latency_jobs=10, small_handles=10_000, large_handles=15_000)
FULL = Plan(seconds=10, reps=3, connections=32, threads=2, flow_connections=16, warm_s=2, mcp_seconds=10,
            runner_jobs=10_000, runner_reps=3, latency_jobs=200, small_handles=10_000, large_handles=1_000_000)


@dataclasses.dataclass(frozen=True)
class SideRun:
    """A side bench's run: its plan, its results folder, when it started (monotonic) and how it is named."""

    plan: Plan
    logs: Path
    started: float
    quick: bool
    stamp: str

    def named(self) -> str:
        """`quick run <stamp>` or `full run <stamp>`, and how long it took so far."""
        return f"{'quick' if self.quick else 'full'} run {self.stamp}, {time.monotonic() - self.started:.0f} s"


def side_run(argv: list[str] | None, description: str | None, name: str) -> SideRun:
    """A side bench's start: `--quick`, or nine short pairs (a pair taken while a neighbour's burst holds the
    CPU would shift a median of three)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="short runs: under a minute")
    args = parser.parse_args(argv)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    logs = ROOT / "bench" / "results" / f"{stamp}-{name}"
    logs.mkdir(parents=True)
    plan = QUICK if args.quick else dataclasses.replace(FULL, reps=9, seconds=3)
    return SideRun(plan, logs, time.monotonic(), args.quick, stamp)


class Bench:
    def __init__(self, plan: Plan, logs: Path, redis_server: str | None = None) -> None:
        """`redis_server`: the `redis-server` binary to run (default: the embedded one, see `devtools.embedded`)."""
        self.plan, self.logs = plan, logs
        self.redis = EmbeddedRedis(appendonly=True, data_dir=str(logs / "redis"),
                                   binary=redis_server or redis_server_binary()).start()
        base = f"redis://127.0.0.1:{self.redis.port}"
        self.token, self.ops_token = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
        common = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.product_env = {**common, "REDIS_URL": f"{base}/0", "TASKS_BACKEND_JOBS": "bench.jobs",
                            "TASKS_BACKEND_TOKENS": f"bench:{self.token},ops:{self.ops_token}",
                            "TASKS_BACKEND_ADMINS": "ops",
                            # One principal sends thousands of requests a second and keeps thousands of jobs
                            # queued: the limits are on (every check runs) but set where this load never trips them.
                            "TASKS_BACKEND_RATE_LIMIT": "1000000000", "TASKS_BACKEND_MAX_ACTIVE_JOBS": "1000000000"}
        self.baseline_env = {**common, "BENCH_REDIS_URL": f"{base}/0", "BENCH_BROKER_URL": f"{base}/1",
                             "BENCH_RESULT_URL": f"{base}/1"}
        self.fastmcp_env = {**common, "BENCH_DOCKET_URL": f"{base}/2"}
        self.runtime: Runtime = build_runtime(Settings.from_env(self.product_env))
        self.db0 = redis.Redis(port=self.redis.port, db=0)
        #: Which Redis both sides share, for the header: version and allocator.
        self.redis_build = (f"Redis {self.db0.info('server')['redis_version']} "
                            f"({self.db0.info('memory')['mem_allocator']})")
        # The AOF is rewritten only when `compact` asks, between rows (see there).
        self.db0.config_set("auto-aof-rewrite-percentage", 0)
        self.db1 = redis.Redis(port=self.redis.port, db=1)
        self.ports = {name: free_port() for name in ("product", "baseline", "fastmcp", "a2a-sdk", "a2a-sdk-pg")}
        self.url = {name: f"http://127.0.0.1:{port}" for name, port in self.ports.items()}
        self.running: dict[str, procs.Proc] = {}
        self.rows: list[Row] = []
        self.retained = 0
        self._postgres: Postgres | None = None

    # -- processes ---------------------------------------------------------------------
    def up(self, name: str) -> None:
        if name in self.running:
            return
        if name == "product":
            # Sync workers, as the baselines get (`--threads 1`): per-request cost is what is compared, and
            # gthread's keep-alive pins wrk's connections unevenly to processes (see perf-notes).
            argv = [str(ROOT / ".venv/bin/tasks-backend"), "web", "--workers", str(WEB_WORKERS), "--threads", "1",
                    "--bind", f"127.0.0.1:{self.ports['product']}"]
            env = self.product_env
        elif name == "baseline":
            argv = procs.gunicorn(PRODUCT_PY, "bench.baselines.flask_bare:create_app()", self.ports["baseline"],
                                  WEB_WORKERS)
            env = self.baseline_env
        elif name == "fastmcp":
            argv = procs.gunicorn(BASELINE_PY, "bench.baselines.fastmcp_server:create_app()", self.ports["fastmcp"],
                                  WEB_WORKERS, worker_class="uvicorn_worker.UvicornWorker")
            env = self.fastmcp_env
        elif name in ("a2a-sdk", "a2a-sdk-pg"):
            argv = procs.gunicorn(BASELINE_PY, "bench.baselines.a2a_sdk_server:create_app()", self.ports[name],
                                  WEB_WORKERS, worker_class="uvicorn_worker.UvicornWorker")
            env = {**self.baseline_env, **({"BENCH_A2A_DATABASE_URL": self.postgres().url} if name == "a2a-sdk-pg"
                                           else {})}
        elif name == "product-worker":
            argv = [str(ROOT / ".venv/bin/tasks-backend"), "worker", "--concurrency", "2", "--pool", "prefork"]
            env = self.product_env
        elif name == "product-worker-fair-off":
            argv = [str(ROOT / ".venv/bin/tasks-backend"), "worker", "--concurrency", "2", "--pool", "prefork"]
            env = {**self.product_env, "TASKS_BACKEND_FAIR_SHARES": "0"}
        elif name == "baseline-worker":
            argv = [PRODUCT_PY, "-m", "celery", "-A", "bench.baselines.celery_bare", "worker", "-Q", BARE_QUEUE,
                    "--loglevel=INFO", "--concurrency", "2", "--pool", "prefork"]
            env = self.baseline_env
        else:
            raise ValueError(name)
        proc = procs.start(name, argv, env, self.logs)
        self.running[name] = proc
        if name in self.url:
            ready = "/.well-known/agent-card.json" if name.startswith("a2a-sdk") else "/healthz"
            procs.wait_http(proc, self.url[name] + ready)

    def down(self, name: str) -> None:
        proc = self.running.pop(name, None)
        if proc:
            proc.stop()

    def close(self) -> None:
        for name in list(self.running):
            self.down(name)
        self.redis.stop()
        if self._postgres is not None:
            self._postgres.stop()

    def postgres(self) -> Postgres:
        """The A2A baseline's database, started (and its tasks seeded) on first use."""
        if self._postgres is None:
            self._postgres = Postgres().start()
            subprocess.run([BASELINE_PY, "-m", "bench.baselines.a2a_sdk_server", "seed"], check=True, cwd=ROOT,
                           env={**self.baseline_env, "BENCH_A2A_DATABASE_URL": self._postgres.url})
        return self._postgres

    # -- loads -----------------------------------------------------------------------
    def auth(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.token}"}

    def write_ids(self, name: str, ids: list[str]) -> Path:
        path = self.logs / f"{name}.ids"
        path.write_text("\n".join(ids) + "\n")
        return path

    def finished(self, count: int, owner: str | None = None) -> list[str]:
        ids = fill.finished_handles(self.runtime, self.retained, count,
                                    owner=(lambda n: owner) if owner else (lambda n: f"owner-{n // fill.PER_OWNER}"))
        self.retained += count
        return ids

    def drain_product(self) -> None:
        """Let each side finish the jobs a run created before the next run starts: a row whose calls create
        jobs faster than they are run would otherwise charge them to the next run, the other side's."""
        self.wait_empty(self.db0, self.runtime.settings.queue)
        quiet()  # and the baseline's own backlog, where it executes in its web processes

    def purge_queues(self) -> None:
        """Forget what submits left queued (no worker runs them here): the broker queues and the dispatch gate."""
        queues.purge(self.db0, self.runtime.settings.queue, self.runtime.store.keys)
        self.db1.delete(BARE_QUEUE)

    # -- measures ----------------------------------------------------------------------
    def poll(self) -> None:
        ids = self.poll_ids()
        ours = Load(self.url["product"], path="/v1/jobs/%s", headers=self.auth(), ids=ids)
        theirs = Load(self.url["baseline"], path="/hash/%s", ids=ids)
        warm(self.plan, ours, theirs)
        self.rows.append(self.paired("poll GET /v1/jobs/{id}", "req/s", ">= 1.0x bare HGETALL route", 1.0, self.plan,
                                     fixed(ours, self.plan), fixed(theirs, self.plan), lambda r: r.rps))

    def submit(self) -> None:
        ours = Load(self.url["product"], method="POST", path="/v1/jobs", body=SUBMIT_BODY,
                    headers={**self.auth(), "Content-Type": "application/json"})
        theirs = Load(self.url["baseline"], method="POST", path="/jobs")
        warm(self.plan, ours, theirs)
        self.rows.append(self.paired("submit POST /v1/jobs", "req/s", ">= 1.2x bare apply_async route", 1.2, self.plan,
                                     fixed(ours, self.plan), fixed(theirs, self.plan), lambda r: r.rps))
        self.purge_queues()
        # Every request with an Idempotency-Key never used before: the key is claimed, then the job is
        # enqueued (after the record, in a second round trip: see JobService.submit). The baseline gets
        # the same header, which it ignores.
        keyed = dataclasses.replace(ours, unique_header="Idempotency-Key")
        theirs_keyed = dataclasses.replace(theirs, unique_header="Idempotency-Key")
        warm(self.plan, keyed)
        self.rows.append(self.paired("submit POST /v1/jobs with an Idempotency-Key", "req/s",
                                     ">= 1.0x bare apply_async route", 1.0, self.plan, fixed(keyed, self.plan),
                                     fixed(theirs_keyed, self.plan), lambda r: r.rps))
        self.purge_queues()

    def runner(self) -> None:
        n = self.plan.runner_jobs
        service = self.runtime.service
        from .baselines.celery_bare import make_app

        bare = make_app(self.baseline_env["BENCH_BROKER_URL"], None).tasks["bench.bare_noop"]
        ours: list[float] = []
        theirs: list[float] = []
        cpu: dict[str, list[dict[str, float]]] = {"product": [], "baseline": []}
        calls: dict[str, list[dict[str, float]]] = {"product": [], "baseline": []}
        self.compact()
        for rep in range(self.plan.runner_reps):
            sides = [("product", ours), ("baseline", theirs)]
            for side, out in sides if rep % 2 == 0 else reversed(sides):
                if side == "product":
                    for _ in range(n):
                        service.submit("bench", "bench.noop", {})
                    queue, db, worker = self.runtime.settings.queue, self.db0, "product-worker"
                else:
                    for _ in range(n):
                        bare.apply_async()
                    queue, db, worker = BARE_QUEUE, self.db1, "baseline-worker"
                self.db0.config_resetstat()
                rate, per_job = drain_rate(functools.partial(self.queue_length, db, queue), n,
                                           functools.partial(self.up, worker), functools.partial(self.cpu, worker))
                out.append(rate)
                cpu[side].append(per_job)
                self.wait_empty(db, queue)
                calls[side].append(self.redis_calls(n))
                self.down(worker)
        ratios = [a / b for a, b in zip(ours, theirs, strict=True)]

        self.rows.append(Row("no-op jobs through the runner alone", "jobs/s",
                             ">= 1.0x bare Celery no-op (prefork -c 2, acks_late, prefetch 1)", median(ours),
                             median(theirs), median(ratios), median(ratios) >= 1.0,
                             note=f"CPU us per job, worker main/pool/Redis: {cpu_note(cpu['product'])}; "
                                  f"{cpu_note(cpu['baseline'])}. Redis commands per job, a script and each call "
                                  f"in it counted: {calls_note(calls['product'])}; {calls_note(calls['baseline'])}",
                             samples={"product": ours, "baseline": theirs, "ratio": ratios,
                                      "cpu_s_per_job": cpu, "redis_calls_per_job": calls}))

    def redis_calls(self, jobs: int) -> dict[str, float]:
        """Redis commands per job since the last CONFIG RESETSTAT, by command (Redis counts a script's
        own calls too)."""
        return {name: calls / jobs for name, calls in procs.command_calls(self.db0).items()}

    def redis_script_us(self, jobs: int) -> float:
        """Microseconds per job Redis spent in scripts since the last CONFIG RESETSTAT (`procs.script_usec`)."""
        return procs.script_usec(self.db0) / jobs

    def cpu(self, worker: str) -> dict[str, float]:
        """CPU seconds used so far by a worker's main process, its pool processes and the Redis server."""
        assert self.redis.process is not None
        return procs.worker_cpu(self.running[worker].popen.pid, self.redis.process.pid)

    def paired(self, *args: Any, **kwargs: Any) -> Row:
        """`measures.paired` with this bench's meter (every row alternating two loads gives each side's profile),
        from a compacted AOF."""
        self.compact()
        return paired(*args, meter=self.meter, **kwargs)

    @functools.cached_property
    def meter(self) -> Meter:
        """What each run of a paired row costs, by process (every one the bench runs) and in Redis commands."""
        return Meter(self.process_cpu, self.redis_commands)

    def process_cpu(self) -> dict[str, float]:
        """CPU seconds used so far by each process tree the bench runs, Redis and PostgreSQL included."""
        assert self.redis.process is not None
        spent = {name: procs.tree_cpu_seconds(proc.popen.pid) for name, proc in self.running.items()}
        spent["redis"] = procs.cpu_seconds(self.redis.process.pid)
        if self._postgres is not None:
            spent["postgres"] = procs.tree_cpu_seconds(self._postgres.pid())
        return spent

    def redis_commands(self) -> int:
        """Commands the Redis server has served since its start or last CONFIG RESETSTAT (counted as
        `redis_calls` counts them)."""
        return round(sum(self.redis_calls(1).values()))

    def queue_length(self, db: redis.Redis, queue: str) -> int:
        """Jobs not yet taken: the broker queue's, and those the product's dispatch gate holds (none on the
        baseline's database)."""
        return queues.queued(db, queue, self.runtime.store.keys, self.runtime.settings.queue)

    def wait_empty(self, db: redis.Redis, queue: str, timeout_s: float = 120) -> None:
        queues.wait_idle(db, queue, self.runtime.store.keys, self.runtime.settings.queue, timeout_s)

    def dispatch(self) -> None:
        dispatch.measure(self)

    def mcp(self) -> None:
        protocols.mcp(self)

    def a2a(self) -> None:
        protocols.a2a(self)

    def end_to_end(self) -> None:
        self.up("product-worker")
        self.up("baseline-worker")
        self.latency()
        ours = http_flow(self.url["product"], self.auth())
        theirs = Load(self.url["baseline"], method="POST", path="/jobs",
                      flow={"BENCH_POLL_DELAY_MS": "10", "BENCH_POLL_PATH": "/jobs/%s",
                            "BENCH_ID_PATTERN": '"taskId":%s*"([^"]+)"',
                            "BENCH_DONE_PATTERN": '"status":%s*"SUCCESS"'})
        warm(self.plan, ours, theirs)
        self.rows.append(self.paired("submit, run, poll to done (HTTP)", "jobs/s", ">= 1.2x bare route + bare Celery",
                                     1.2, self.plan, flow(ours, self.plan), flow(theirs, self.plan),
                                     lambda r: r.jobs_per_s))
        # The product's MCP flow against its own HTTP flow, alternated under the same conditions (before any
        # MCP baseline server runs): what the protocol layer costs on top of the job.
        mcp_ours = mcp_flow(self.url["product"], self.auth())
        warm(self.plan, mcp_ours)
        self.rows.append(self.paired("MCP end to end vs the product's HTTP end to end", "jobs/s",
                                     ">= 0.95x the product's HTTP flow", 0.95, self.plan, flow(mcp_ours, self.plan),
                                     flow(ours, self.plan), lambda r: r.jobs_per_s))

    def latency(self) -> None:
        """Submit -> running on an idle system: one job at a time, read from the job's own event feed."""
        keys, store = self.runtime.store.keys, self.runtime.store
        client_ms: list[float] = []
        server_ms: list[float] = []
        self.compact()
        with httpx.Client(base_url=self.url["product"], headers=self.auth(), timeout=10) as http:
            for i in range(self.plan.latency_jobs + 3):
                sent = time.time() * 1000
                job = http.post("/v1/jobs", json={"operation": "bench.noop", "params": {}}).json()
                deadline = time.monotonic() + 30
                running = None
                while running is None and time.monotonic() < deadline:
                    entries = store.redis.xrange(keys.events(job["taskId"]))
                    running = next((int(f["u"]) for _, f in entries if f.get("s") == "running"), None)
                    if running is None:
                        time.sleep(0.002)
                record = store.get(job["taskId"])
                if running is None or record is None:
                    raise RuntimeError("a latency probe job never ran")
                if i >= 3:  # the first jobs meet cold worker processes
                    client_ms.append(running - sent)
                    server_ms.append(running - record.created_ms)
                while not (store.get(job["taskId"]) or record).terminal and time.monotonic() < deadline:
                    time.sleep(0.002)
        p50 = median(client_ms)
        # The rest of the client's figure: the request's way in, up to the submit's script (createdAt).
        before = median([c - s for c, s in zip(client_ms, server_ms, strict=True)])
        self.rows.append(Row("submit -> job running, idle", "ms p50", "p50 <= 2 ms", p50, passed=p50 <= 2,
                             p50_ms=p50, p99_ms=percentile(client_ms, 0.99),
                             note=f"server-side (createdAt -> running) p50 {median(server_ms):.1f} ms; the "
                                  f"client's send -> createdAt p50 {before:.1f} ms",
                             samples={"client_ms": client_ms, "server_ms": server_ms}))

    def poll_ids(self) -> Path:
        """A file of 1,000 finished jobs of the bench's principal, made once: what every poll-like row reads."""
        path = self.logs / "poll.ids"
        return path if path.exists() else self.write_ids("poll", self.finished(1000, owner="bench"))

    def scale(self) -> None:
        """Poll p99 and memory per handle as retained finished handles grow from small to large."""
        for worker in ("product-worker", "baseline-worker"):
            self.down(worker)
        small, large = self.plan.small_handles, self.plan.large_handles
        ids = self.finished(max(0, small - self.retained))
        self.compact()
        before_mem, before_n = self.used_memory(), self.retained
        sample = self.write_ids("small", ids[-1000:])
        target = Load(self.url["product"], path="/v1/jobs/%s", headers=self.auth(self.ops_token), ids=sample)
        warm(self.plan, target)
        p99_small = [fixed(target, self.plan)().p99_ms for _ in range(self.plan.reps)]
        added: list[str] = []
        while self.retained < large:
            added += self.finished(min(100_000, large - self.retained))
        with_feeds = self.used_memory()
        fill.drop_feeds(self.runtime, added)
        after_mem = self.used_memory()
        per_handle = (after_mem - before_mem) / (self.retained - before_n)
        per_handle_feeds = (with_feeds - before_mem) / (self.retained - before_n)
        self.rows.append(Row("Redis memory per retained finished handle", "bytes", "<= 500 bytes (small result)",
                             per_handle, passed=per_handle <= 500,
                             note=f"{per_handle_feeds:.0f} bytes while the event feed is kept (60 s after the end); "
                                  f"{fill.PER_OWNER} handles per owner"))
        picked = [added[i] for i in range(0, len(added), max(1, len(added) // 1000))][:1000]
        target = Load(self.url["product"], path="/v1/jobs/%s", headers=self.auth(self.ops_token),
                      ids=self.write_ids("large", picked))
        self.compact()
        warm(self.plan, target)
        p99_large = [fixed(target, self.plan)().p99_ms for _ in range(self.plan.reps)]
        ratio = median(p99_large) / median(p99_small)
        self.rows.append(Row(f"poll p99 with {large:,} retained vs {small:,}", "ms p99", "<= 1.2x", median(p99_large),
                             median(p99_small), ratio, ratio <= 1.2, p99_ms=median(p99_large),
                             base_p99_ms=median(p99_small), samples={"large": p99_large, "small": p99_small}))

    def used_memory(self) -> int:
        return int(self.db0.info("memory")["used_memory"])

    def compact(self) -> None:
        """Rewrite the AOF now, and wait for it. Left to itself Redis rewrites whenever the file doubled: a fork and
        a child that takes a whole core for 2 to 14 s once a minute or so in the submit rows (the file doubles that
        fast when every row leaves its jobs behind), landing in whichever side's run is on at the time. Rewritten
        before each row instead, no rewrite runs inside a measured window; the AOF stays on (fsync every second),
        so each side's writes still cost what they cost."""
        self.db0.bgrewriteaof()
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            info = self.db0.info("persistence")
            if not info.get("aof_rewrite_in_progress") and not info.get("aof_rewrite_scheduled"):
                return
            time.sleep(0.2)
        raise RuntimeError("the AOF rewrite did not finish in 10 minutes")


MEASURES = ("poll", "submit", "runner", "dispatch", "end_to_end", "mcp", "a2a", "scale")


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem_kb = int(next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal")).split()[1])
    return (f"{os.cpu_count()} cores ({cpu}), {mem_kb / 1048576:.0f} GiB, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short runs, small handle counts: under a minute")
    parser.add_argument("--only", nargs="*", choices=MEASURES, help="run only these measures")
    parser.add_argument("--redis-server", metavar="PATH",
                        help="the redis-server binary both sides share (default: the embedded one)")
    parser.add_argument("--runner-reps", type=int, metavar="N",
                        help="alternations of the runner rows (default 3, quick 1; the gate's row takes twice as "
                             "many pairs of half the jobs): more pairs where a machine's speed drifts")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.runner_reps:
        plan = dataclasses.replace(plan, runner_reps=args.runner_reps)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    logs = ROOT / "bench" / "results" / stamp
    (logs / "redis").mkdir(parents=True)
    started = time.monotonic()
    bench = Bench(plan, logs, args.redis_server)
    try:
        bench.up("product")
        bench.up("baseline")
        for name in args.only or MEASURES:
            getattr(bench, name)()
            print(f"  {name} done ({time.monotonic() - started:.0f}s)", file=sys.stderr, flush=True)
    finally:
        bench.close()
    header = (f"tasks-backend benchmark, {'quick' if args.quick else 'full'} run {stamp}, "
              f"{time.monotonic() - started:.0f} s; {machine()}; {bench.redis_build}")
    print(header)
    print(table(bench.rows))
    (logs / "table.md").write_text(header + "\n\n" + markdown(bench.rows) + "\n")
    (logs / "results.json").write_text(json.dumps({"header": header, "plan": plan.__dict__,
                                                   "rows": [r.__dict__ for r in bench.rows]}, indent=2))
    print(f"\nlogs and results: {logs.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
