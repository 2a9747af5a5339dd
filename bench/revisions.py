"""`make bench-revisions OLD=<rev> [NEW=<rev>]`: two revisions of the product side by side, in one run.

Usage: python -m bench.revisions OLD [NEW] [--quick] [--only ROW ...] [--pairs N]. Each revision is checked out
in a git worktree under bench/.trees/ and installed there (`make install`, once); without NEW the other side is
this checkout as it is. One Redis serves both (OLD in database 1, NEW in database 2: the same key names on each
side), and both web servers run throughout. Every row alternates the sides run by run, as the main bench
alternates the product and its baseline, and its figure is NEW / OLD: so the machine's drift between two separate
runs, which on these instances is larger than the 5% a code change is judged by, cancels out. Results go to
bench/results/<time>-revisions/.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import redis

from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import EmbeddedRedis, free_port
from tasks_backend.store.keys import Keys

from . import procs, queues
from .load import Load, Run
from .measures import Meter, Plan, Row, cpu_note, drain_rate, fixed, flow, median, median_interval, paired, warm
from .protocols import (
    A2A_GET,
    A2A_HEADERS,
    A2A_SEND,
    MCP_CALL,
    MCP_CALL_HEADERS,
    MCP_GET,
    MCP_GET_HEADERS,
    SUBMIT_BODY,
    http_flow,
)
from .report import save
from .run import FULL, QUICK, ROOT, WEB_WORKERS, machine

TREES = ROOT / "bench" / ".trees"
SIDES = ("old", "new")
#: The rows, in the order they run (`--only` picks some).
ROWS = ("flow", "mcp_call", "a2a_send", "poll", "mcp_get", "a2a_get", "submit", "submit_idem", "runner")
#: Both sides' broker queue and key prefix (the defaults); the dispatch gate's keys are named as this checkout names
#: them (a revision without a gate has none).
QUEUE, KEYS = Settings.queue, Keys(Settings.key_prefix)


@dataclasses.dataclass
class Side:
    """One revision: its checkout, its Redis database, its web server and (while up) its worker."""

    name: str
    rev: str
    tree: Path
    db: int
    url: str = ""
    web: procs.Proc | None = None
    worker: procs.Proc | None = None
    poll_ids: Path | None = None


def spread(ratios: list[float]) -> str:
    """The pairs' range, and where the true median lies at 90% or more (`median_interval`): a row whose interval
    stays above 0.95 rules out a cost of 5%."""
    low, high = median_interval(ratios)
    return f"pairs {min(ratios):.2f}x to {max(ratios):.2f}x, median within {low:.2f}x to {high:.2f}x"


def checkout(rev: str) -> Path:
    """A worktree of `rev`, installed (kept for the next run: an install takes most of a minute)."""
    sha = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()
    tree = TREES / sha[:12]
    if not (tree / ".git").exists():
        TREES.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), sha], cwd=ROOT, check=True)
    if not (tree / ".venv" / "bin" / "tasks-backend").exists():
        subprocess.run(["make", "-C", str(tree), "install"], check=True)
    return tree


class Revisions:
    def __init__(self, old: Side, new: Side, plan: Plan, logs: Path, only: tuple[str, ...] = ROWS) -> None:
        self.sides = {"old": old, "new": new}
        self.only = set(only)
        self.plan, self.logs = plan, logs
        self.redis = EmbeddedRedis(appendonly=True, data_dir=str(logs / "redis")).start()
        # One client per database, made once: the drains read a side's queues every few milliseconds, and a client
        # made per reading would connect anew each time, inside the measured window.
        self.clients = {db: redis.Redis(port=self.redis.port, db=db) for db in {0, old.db, new.db}}
        self.token = secrets.token_urlsafe(16)
        self.rows: list[Row] = []

    # -- processes ---------------------------------------------------------------------
    def env(self, side: Side) -> dict[str, str]:
        # Nothing of the shell's own product settings reaches either side: both get exactly these.
        base = {k: v for k, v in os.environ.items() if not k.startswith(("TASKS_BACKEND_", "OTEL_", "REDIS_"))}
        return {**base, "PYTHONPATH": str(side.tree),
                "REDIS_URL": f"redis://127.0.0.1:{self.redis.port}/{side.db}", "TASKS_BACKEND_JOBS": "bench.jobs",
                "TASKS_BACKEND_TOKENS": f"bench:{self.token}",
                "TASKS_BACKEND_RATE_LIMIT": "1000000000", "TASKS_BACKEND_MAX_ACTIVE_JOBS": "1000000000"}

    def up_web(self, side: Side) -> None:
        port = free_port()
        side.url = f"http://127.0.0.1:{port}"
        side.web = procs.start(f"web-{side.name}", [str(side.tree / ".venv/bin/tasks-backend"), "web", "--workers",
                                                    str(WEB_WORKERS), "--threads", "1", "--bind", f"127.0.0.1:{port}"],
                               self.env(side), self.logs, cwd=side.tree)
        procs.wait_http(side.web, f"{side.url}/healthz")

    def up_worker(self, side: Side) -> None:
        if side.worker is None:
            side.worker = procs.start(f"worker-{side.name}", [str(side.tree / ".venv/bin/tasks-backend"), "worker",
                                                               "--concurrency", "2", "--pool", "prefork"],
                                      self.env(side), self.logs, cwd=side.tree)

    def down_worker(self, side: Side) -> None:
        if side.worker is not None:
            side.worker.stop()
            side.worker = None

    def close(self) -> None:
        for side in self.sides.values():
            self.down_worker(side)
            if side.web is not None:
                side.web.stop()
        for client in self.clients.values():
            client.close()
        self.redis.stop()

    def db(self, side: Side) -> redis.Redis:
        return self.clients[side.db]

    # -- queues ------------------------------------------------------------------------
    def queued(self, side: Side) -> int:
        return queues.queued(self.db(side), QUEUE, KEYS)

    def idle(self, side: Side) -> None:
        queues.wait_idle(self.db(side), QUEUE, KEYS)

    def purge(self) -> None:
        """Forget what submits left queued on both sides (no worker runs them in the submit rows)."""
        for side in self.sides.values():
            queues.purge(self.db(side), QUEUE, KEYS)

    def drained(self) -> None:
        for side in self.sides.values():
            self.idle(side)

    def submit_many(self, side: Side, n: int) -> list[str]:
        headers = {**self.auth(), "Content-Type": "application/json"}
        with httpx.Client(base_url=side.url, headers=headers, timeout=30) as client, ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: client.post("/v1/jobs", content=SUBMIT_BODY), range(n)))
        for answer in answers:
            answer.raise_for_status()
        return [a.json()["taskId"] for a in answers]

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    # -- rows --------------------------------------------------------------------------
    def pair(self, key: str, name: str, unit: str, loads: dict[str, Load], figure: Callable[[Run], float],
             runner: Callable[[Load, Plan], Callable[[], Run]] = fixed,
             settle: Callable[[], None] | None = None) -> None:
        if key not in self.only:
            return
        warm(self.plan, *loads.values())
        row = paired(name, unit, "-", 0.0, self.plan, runner(loads["new"], self.plan), runner(loads["old"], self.plan),
                     figure, settle=settle, meter=Meter(self.process_cpu, self.redis_commands))
        row.passed = None  # a comparison, not a target
        row.note = "; ".join(x for x in (row.note, spread(row.samples["ratio"])) if x)
        self.rows.append(row)
        print(f"{name}: {row.ratio:.3f}x", flush=True)

    def loads(self, make: Callable[[Side], Load]) -> dict[str, Load]:
        return {name: make(side) for name, side in self.sides.items()}

    def measure(self, runner_jobs: int, runner_reps: int) -> None:
        old, new = self.sides["old"], self.sides["new"]
        for side in (old, new):
            self.up_web(side)
            self.up_worker(side)
            if self.only & {"poll", "mcp_get", "a2a_get"}:
                ids = self.submit_many(side, 1000)
                self.idle(side)
                side.poll_ids = self.logs / f"poll-{side.name}.ids"
                side.poll_ids.write_text("\n".join(ids) + "\n")
        json_headers = {**self.auth(), "Content-Type": "application/json"}
        a2a_headers = {**A2A_HEADERS, **self.auth()}
        # Rows that create jobs, each side's worker running them.
        self.pair("flow", "submit, run, poll to done (HTTP)", "jobs/s",
                  self.loads(lambda s: http_flow(s.url, self.auth())),
                  lambda r: r.jobs_per_s, runner=flow, settle=self.drained)
        self.pair("mcp_call", "MCP tools/call -> task handle", "req/s",
                  self.loads(lambda s: Load(s.url, method="POST", path="/mcp", body=MCP_CALL,
                                            headers={**MCP_CALL_HEADERS, **self.auth()})),
                  lambda r: r.rps, settle=self.drained)
        self.pair("a2a_send", "A2A SendMessage (returnImmediately)", "req/s",
                  self.loads(lambda s: Load(s.url, method="POST", path="/a2a", body=A2A_SEND, headers=a2a_headers)),
                  lambda r: r.rps, settle=self.drained)
        for side in (old, new):
            self.idle(side)
            self.down_worker(side)
        # Rows that read finished jobs, and submits no worker runs.
        self.pair("poll", "poll GET /v1/jobs/{id}", "req/s",
                  self.loads(lambda s: Load(s.url, path="/v1/jobs/%s", headers=self.auth(), ids=s.poll_ids)),
                  lambda r: r.rps)
        self.pair("mcp_get", "MCP tasks/get", "req/s",
                  self.loads(lambda s: Load(s.url, method="POST", path="/mcp", body=MCP_GET,
                                            headers={**MCP_GET_HEADERS, **self.auth()}, ids=s.poll_ids)),
                  lambda r: r.rps)
        self.pair("a2a_get", "A2A GetTask", "req/s",
                  self.loads(lambda s: Load(s.url, method="POST", path="/a2a", body=A2A_GET, headers=a2a_headers,
                                            ids=s.poll_ids)),
                  lambda r: r.rps)
        submit = self.loads(lambda s: Load(s.url, method="POST", path="/v1/jobs", body=SUBMIT_BODY,
                                           headers=json_headers))
        self.pair("submit", "submit POST /v1/jobs", "req/s", submit, lambda r: r.rps, settle=self.purge)
        self.pair("submit_idem", "submit POST /v1/jobs with an Idempotency-Key", "req/s",
                  {name: dataclasses.replace(load, unique_header="Idempotency-Key") for name, load in submit.items()},
                  lambda r: r.rps, settle=self.purge)
        self.purge()
        if "runner" in self.only:
            self.runner(runner_jobs, runner_reps)

    def runner(self, n: int, reps: int) -> None:
        """No-op jobs drained by a fresh worker of each side (prefork -c 2), alternating who goes first."""
        rates: dict[str, list[float]] = {name: [] for name in SIDES}
        cpu: dict[str, list[dict[str, float]]] = {name: [] for name in SIDES}
        for rep in range(reps):
            for name in SIDES if rep % 2 == 0 else tuple(reversed(SIDES)):
                side = self.sides[name]
                self.submit_many(side, n)
                rate, per_job = drain_rate(functools.partial(self.queued, side), n,
                                           functools.partial(self.up_worker, side),
                                           functools.partial(self.cpu, side))
                rates[name].append(rate)
                cpu[name].append(per_job)
                self.idle(side)
                self.down_worker(side)
        ratios = [a / b for a, b in zip(rates["new"], rates["old"], strict=True)]
        self.rows.append(Row("no-op jobs through the runner alone", "jobs/s", "-", median(rates["new"]),
                             median(rates["old"]), median(ratios), None,
                             note=f"{spread(ratios)}; CPU us per job, worker "
                                  f"main/pool/Redis: {cpu_note(cpu['new'])}; {cpu_note(cpu['old'])}",
                             samples={"product": rates["new"], "baseline": rates["old"], "ratio": ratios,
                                      "cpu_s_per_job": cpu}))
        print(f"runner: {median(ratios):.3f}x", flush=True)

    def process_cpu(self) -> dict[str, float]:
        """CPU seconds used so far by each side's web server and worker (whole process trees) and by Redis:
        while one side runs, the other's processes idle, and Redis's time is the running side's."""
        assert self.redis.process is not None
        spent = {"redis": procs.cpu_seconds(self.redis.process.pid)}
        for side in self.sides.values():
            for kind, proc in (("web", side.web), ("worker", side.worker)):
                if proc is not None:
                    spent[f"{kind} {side.name}"] = procs.tree_cpu_seconds(proc.popen.pid)
        return spent

    def redis_commands(self) -> int:
        """Commands Redis has served since it started (a script and each call in it counted)."""
        return sum(procs.command_calls(self.clients[0]).values())

    def cpu(self, side: Side) -> dict[str, float]:
        assert side.worker is not None and self.redis.process is not None
        return procs.worker_cpu(side.worker.popen.pid, self.redis.process.pid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("old", help="the revision compared against (a commit, tag or branch)")
    parser.add_argument("new", nargs="?", help="the revision compared (default: this checkout as it is)")
    parser.add_argument("--quick", action="store_true", help="short runs: a smoke run of the harness")
    parser.add_argument("--only", nargs="*", choices=ROWS, default=ROWS, help="run only these rows")
    parser.add_argument("--pairs", type=int, default=9, help="pairs of 3 s runs per row (default 9)")
    args = parser.parse_args(argv)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    logs = ROOT / "bench" / "results" / f"{stamp}-revisions"
    (logs / "redis").mkdir(parents=True)
    # Nine pairs of 3 s per row, as the side benches take them: more pairs to stand a median on than three of 10 s.
    plan = QUICK if args.quick else dataclasses.replace(FULL, reps=args.pairs, seconds=3)
    old = Side("old", args.old, checkout(args.old), db=1)
    new = Side("new", args.new or "this checkout", checkout(args.new) if args.new else ROOT, db=2)
    started = time.monotonic()
    bench = Revisions(old, new, plan, logs, tuple(args.only))
    try:
        bench.measure(plan.runner_jobs // 2, 2 * plan.runner_reps)
    finally:
        bench.close()
    header = (f"tasks-backend revisions side by side, NEW {new.rev} / OLD {old.rev}, "
              f"{'quick' if args.quick else 'full'} run {stamp}, {time.monotonic() - started:.0f} s; {machine()}")
    save(logs, header, bench.rows)
    print(f"\nlogs and results: {logs.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
