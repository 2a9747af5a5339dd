"""`make bench-tracing`: what traces cost a submit and a poll, every request sampled, against tracing off.

Usage: python -m bench.tracing [--quick]. One Redis; two product web servers, alike but for the OTLP variables:
one exports every request's spans (`OTEL_TRACES_SAMPLER=always_on`) to an OTLP/HTTP receiver on loopback (this
process, which counts what it gets without decoding it), the other has no endpoint (tracing off). The same wrk
load submits to each, then polls each, in alternating runs; every figure is a ratio of the traced side over
the other, in the same run (target for submits: >= 0.8x). Results go to bench/results/<time>-tracing/.
"""

from __future__ import annotations

import json
import os
import secrets
import sys

import httpx
import redis

from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import EmbeddedRedis, free_port
from tasks_backend.devtools.receivers import OtlpReceiver

from . import procs
from .load import Load, Run
from .measures import Row, fixed, paired, together, warm
from .report import save
from .run import ROOT, WEB_WORKERS, machine, side_run

#: The submit target: traced submits keep at least this share of untraced ones' rate.
MINIMUM = 0.8


def main(argv: list[str] | None = None) -> int:
    this = side_run(argv, __doc__, "tracing")
    plan, logs = this.plan, this.logs
    server = EmbeddedRedis().start()
    receiver = OtlpReceiver(decode=False)
    token = secrets.token_urlsafe(16)
    # The untraced side must see no OTLP variable, whatever the shell running the bench has set.
    base = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    env = {**base, "PYTHONPATH": str(ROOT), "REDIS_URL": f"redis://127.0.0.1:{server.port}/0",
           "TASKS_BACKEND_JOBS": "bench.jobs", "TASKS_BACKEND_TOKENS": f"bench:{token}",
           "TASKS_BACKEND_RATE_LIMIT": "1000000000", "TASKS_BACKEND_MAX_ACTIVE_JOBS": "1000000000"}
    sides = {"on": {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_TRACES_SAMPLER": "always_on",
                    "OTEL_SERVICE_NAME": "tasks-backend-bench"},
             "off": {}}
    client = redis.Redis(port=server.port)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    running: list[procs.Proc] = []
    rows: list[Row] = []
    try:
        urls: dict[str, str] = {}
        for side, extra in sides.items():
            port = free_port()
            proc = procs.start(f"web-{side}", [str(ROOT / ".venv/bin/tasks-backend"), "web", "--workers",
                                               str(WEB_WORKERS), "--threads", "1", "--bind", f"127.0.0.1:{port}"],
                               {**env, **extra}, logs)
            running.append(proc)
            procs.wait_http(proc, f"http://127.0.0.1:{port}/healthz")
            urls[side] = f"http://127.0.0.1:{port}"
        body = json.dumps({"operation": "bench.noop", "params": {}})
        submit = {side: Load(url, method="POST", path="/v1/jobs", body=body, headers=headers)
                  for side, url in urls.items()}
        job_id = httpx.post(f"{urls['off']}/v1/jobs", content=body, headers=headers).json()["taskId"]
        poll = {side: Load(url, path=f"/v1/jobs/{job_id}", headers=headers) for side, url in urls.items()}
        warm(plan, *submit.values(), *poll.values())
        queue = Settings.from_env(env).queue

        def clear() -> None:
            client.delete(queue)  # no worker runs the submits: keep the queue from growing across runs

        def submits(side: str) -> Run:
            run = fixed(submit[side], plan)()
            clear()
            return run

        before = receiver.requests
        row = paired("submit POST /v1/jobs, traced / untraced", "req/s", f">= {MINIMUM}x", MINIMUM, plan,
                     lambda: submits("on"), lambda: submits("off"), lambda r: r.rps)
        rows.append(row)
        # The same submits with both sides loaded at once: one moment of the machine for both.
        both = together("submit POST /v1/jobs, traced / untraced, loaded at once", "req/s", f">= {MINIMUM}x",
                        MINIMUM, plan, submit["on"], submit["off"], lambda r: r.rps,
                        settle=clear)
        rows.append(both)
        polls = paired("poll GET /v1/jobs/{id}, traced / untraced", "req/s", "-", 0.0, plan,
                       fixed(poll["on"], plan), fixed(poll["off"], plan), lambda r: r.rps)
        polls.passed = None  # a price to know, not a target to meet
        rows.append(polls)
        for each in rows:
            ratios = each.samples["ratio"]
            each.note = f"pairs {min(ratios):.2f}x to {max(ratios):.2f}x"
        if receiver.requests == before:
            row.passed, row.note = False, "the traced side exported nothing"
        print(f"submit traced / untraced: {row.ratio:.2f}x, loaded at once {both.ratio:.2f}x (target >= "
              f"{MINIMUM}x); poll: {polls.ratio:.2f}x; "
              f"{receiver.requests - before} OTLP exports received")
    finally:
        for proc in running:
            proc.stop()
        receiver.close()
        server.stop()
    header = (f"tasks-backend traces on (every request sampled, exported to a local receiver) vs off, "
              f"{this.named()}; {machine()}")
    save(logs, header, rows)
    print(f"\nlogs and results: {logs.relative_to(ROOT)}")
    return 0 if all(r.passed is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
