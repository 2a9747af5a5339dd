"""`python -m soak`: start the system, drive the mix through the fault schedule, check, report."""

from __future__ import annotations

import argparse
import os
import random
import secrets
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tasks_backend.errors import StoreUnavailable
from tasks_backend.store.connect import connect
from tasks_backend.store.jobs import RedisStore
from tasks_backend.store.keys import Keys

from . import checks, report
from .driver import RETRY_S, TERMINAL, Api, Driver
from .faults import Fault, Injector, schedule
from .services import Downstream, Malformed, Receiver, dead_url
from .system import ROOT, System, faketime_library
from .ticks import Schedules

PREFIX = "soak"
LEASE_S = 6.0


@dataclass(frozen=True)
class Plan:
    jobs: int
    drive_s: float
    per_kind: int
    drain_s: float
    skew_hold_s: float
    probe_s: float

    @classmethod
    def of(cls, quick: bool, jobs: int | None) -> Plan:
        if quick:
            return cls(jobs or 300, 85.0, 1, 70.0, 10.0, 30.0)
        count = jobs or 10_000
        return cls(count, max(120.0, count / 7), 6, 300.0, 20.0, 90.0)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m soak", description=__doc__)
    p.add_argument("--quick", action="store_true", help="a few hundred jobs, every fault kind once (< 3 min)")
    p.add_argument("--seed", type=int, default=None, help="replay a run (default: a fresh seed, printed)")
    p.add_argument("--jobs", type=int, default=None, help="number of jobs (default 300 quick, 10000 full)")
    p.add_argument("--supervise", choices=("on-failure", "always"), default="on-failure",
                   help="restart policy for processes that exit on their own (systemd's names)")
    p.add_argument("--receivers", default="slow,dead,malformed",
                   help="the push receiver each push job gets besides the healthy one (comma-separated)")
    p.add_argument("--keep", action="store_true", help="keep the run directory (logs, AOF, ledger) even on success")
    p.add_argument("--broker", default=None, metavar="AMQP_URL",
                   help="RabbitMQ as the broker (`amqp://…`); by default the store's Redis is the broker too")
    return p.parse_args(argv)


def env_for(run_dir: Path, tokens: dict[str, str], downstream: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TASKS_BACKEND_", "FLOWER_", "REDIS_URL", "CELERY_", "LD_PRELOAD", "FAKETIME"))}
    env.update({
        "TASKS_BACKEND_KEY_PREFIX": PREFIX,
        "TASKS_BACKEND_QUEUE": PREFIX,
        "TASKS_BACKEND_JOBS": "tasks_backend.demo,soak.jobs",
        "TASKS_BACKEND_TOKENS": ",".join(f"{p}:{t}" for p, t in tokens.items()),
        "TASKS_BACKEND_PUSH_ALLOW_PRIVATE": "1",
        # Short enough that a lost worker's job is picked up within a quick run; long enough for a stall.
        "TASKS_BACKEND_LEASE": str(LEASE_S),
        "TASKS_BACKEND_QUEUED_GRACE": "5",
        "TASKS_BACKEND_SWEEP_INTERVAL": "1",
        "TASKS_BACKEND_PUSH_TIMEOUT": "3",
        "SOAK_LEDGER": str(run_dir / "ledger.jsonl"),
        "SOAK_DOWNSTREAM": downstream,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    })
    return env


def wait_ready(system: System, token: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(base_url=system.base_url, timeout=5) as http:
        while time.monotonic() < deadline:
            try:
                if http.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        else:
            raise RuntimeError(f"web did not come up; see {system.run_dir}/web.log")
    for child in system.workers():  # each worker's pool must be up before the faults begin
        while len(system.pool_children(child.name)) < system.concurrency:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{child.name} did not come up; see {child.log}")
            time.sleep(0.3)


def probe(api: Api, store: RedisStore, token: str, deadline_s: float) -> tuple[float | None, str]:
    """Seconds until a job submitted now completes (None if not within `deadline_s`)."""
    start = time.monotonic()
    response = api.call("POST", "/v1/jobs", token, json={"operation": "soak.probe", "params": {}},
                        headers={"Idempotency-Key": f"probe-{secrets.token_hex(8)}"}, retry_s=deadline_s)
    if response is None or response.status_code != 202:
        return None, f"probe not accepted ({None if response is None else response.status_code})"
    job_id = str(response.json()["taskId"])
    while time.monotonic() - start < deadline_s:
        try:
            record = store.get(job_id)
        except StoreUnavailable:
            record = None
        if record is not None and record.state.value in TERMINAL:
            return time.monotonic() - start, "" if record.state.value == "completed" else record.state.value
        time.sleep(0.1)
    return None, f"probe {job_id} not done within {deadline_s:.0f}s"


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    plan = Plan.of(args.quick, args.jobs)
    options = [*(["--jobs", str(args.jobs)] if args.jobs else []),
               *(["--supervise", args.supervise] if args.supervise != "on-failure" else []),
               *(["--receivers", args.receivers] if args.receivers != "slow,dead,malformed" else []),
               *(["--broker", args.broker] if args.broker else [])]
    command = f"make soak{' QUICK=1' if args.quick else ''} SEED={seed}" + (
        f" SOAK_ARGS='{' '.join(options)}'" if options else "")
    if faketime_library() is None:
        print("soak: libfaketime is needed for the clock fault (apt-get install libfaketime)", file=sys.stderr)
        return 2
    faults = schedule(seed, drive_s=plan.drive_s, per_kind=plan.per_kind, worker_count=2,
                      skew_hold_s=plan.skew_hold_s)
    run_dir = Path(tempfile.mkdtemp(prefix=f"soak-{seed}-"))
    print(f"soak seed {seed}: {plan.jobs} jobs over {plan.drive_s:.0f}s, {len(faults)} faults; "
          f"supervisor {args.supervise}; logs in {run_dir}")
    print("schedule:")
    for fault in faults:
        print(f"  {fault.describe()}")
    sys.stdout.flush()

    tokens = {f"soak-{i}": secrets.token_urlsafe(16) for i in range(2)}
    downstream, healthy = Downstream(), Receiver()
    slow, malformed = Receiver(delay_s=0.5), Malformed()
    offered = {"slow": slow.url, "dead": dead_url(), "malformed": malformed.url}
    others = {name: offered[name] for name in args.receivers.split(",") if name}
    system = System(run_dir, env=env_for(run_dir, tokens, downstream.url), supervise=args.supervise,
                    broker_url=args.broker)
    api = Api(system.base_url)
    token_list = list(tokens.values())
    system.on_event = lambda e: print(f"  [{e.at - t0:7.1f}s] {e.process}: {e.what}", flush=True)
    t0 = time.monotonic()
    injector: Injector | None = None
    try:
        system.start()
        wait_ready(system, token_list[0])
        store = RedisStore(connect(system.redis.url, 2.0), Keys(PREFIX), max_ttl_ms=30 * 86400_000)
        first, _ = probe(api, store, token_list[0], 60)
        if first is None:
            raise RuntimeError(f"the system does not run jobs before any fault; see {run_dir}")
        driver = Driver(api, token_list, seed, healthy=healthy, others=others)
        schedules = Schedules(api, token_list[0], next(iter(tokens)), store)
        schedules.create()
        probes: list[threading.Thread] = []

        def after_fault(fault: Fault) -> None:
            print(f"  [{fault.started - t0:7.1f}s] {fault.kind}: {fault.note}", flush=True)

            def measure() -> None:
                fault.recovery_s, fault.probe_error = probe(api, store, token_list[0], plan.probe_s)
            thread = threading.Thread(target=measure, daemon=True)
            thread.start()
            probes.append(thread)

        t0 = time.monotonic()
        injector = Injector(system, faults, t0, after_fault)
        injector.start()
        threading.Thread(target=driver.bot, args=(store,), daemon=True).start()
        threading.Thread(target=driver.watch, args=(store,), daemon=True).start()
        driver.drive(plan.jobs, plan.drive_s)
        injector.done.wait()
        schedules.pause()  # ticking ran through every fault; what it made drains with the rest
        schedules.track(driver)
        drive_end = time.monotonic()
        print(f"  [{drive_end - t0:7.1f}s] all jobs started, all faults injected; draining "
              f"(bound {plan.drain_s:.0f}s)", flush=True)
        deadline = drive_end + plan.drain_s
        last: list[str] = []
        while time.monotonic() < deadline:
            left = driver.observe(store)
            missing = push_missing(driver, healthy)
            if not left and not missing:
                break
            last = sorted({j.kind for j in driver.jobs if j.id and j.final is None} | ({"push"} if missing else set()))
            time.sleep(0.5)
        print(f"  [{time.monotonic() - t0:7.1f}s] drained (the last to end: {', '.join(last) or '-'})", flush=True)
        for thread in probes:
            thread.join(plan.probe_s + 5)
        time.sleep(1.0)  # let a process that died in the last moments be seen
        settle = time.monotonic() + 30  # one restarted by the last fault may still be starting its pool
        while system.processes_down() and time.monotonic() < settle:
            time.sleep(0.5)
        driver.stop.set()
        schedules.track(driver)  # a tick made late, after the pause
        driver.observe(store)
        blame = report.Attribution(faults, settle_s=2 * LEASE_S)
        findings = report.Findings()
        kinds = checks.family(driver, api, findings, blame, t0)  # adds the children to the jobs checked
        findings = check(driver, api, system, store, faults, healthy, downstream, run_dir, t0, findings)
        kinds += checks.timing(driver, downstream, findings, blame, t0)
        kinds += schedules.check(findings, faults, run_dir / "ledger.jsonl", blame)
        extra = [*kinds, f"http: {api.unavailable} answers 503 with Retry-After or JSON-RPC -32603 (retried), "
                 f"{api.throttled} 429, "
                 f"{api.transport_errors} dropped connections or timeouts (retried); "
                 f"downstream deduplicated {downstream.repeats} repeated keys",
                 f"proxy swallowed {system.proxy.dropped_replies if system.proxy else 0} replies",
                 "process events: " + (", ".join(f"{e.process} at {e.at - t0:.0f}s: {e.what}"
                                                  for e in system.events) or "none"),
                 *[f"injection error: {e}" for e in injector.errors],
                 *[f"client error: {e}" for e in driver.client_errors[:10]],
                 *[f"recovery probe after {f.kind} at {f.started - t0:.0f}s: {f.probe_error}"
                   for f in faults if f.probe_error]]
        report.print_report(findings, faults, seed=seed, jobs=driver.jobs, extra=extra, command=command)
        failed = findings.failed() or injector.errors or driver.client_errors
    finally:
        if injector is not None:
            injector.finish.set()
        system.close()
        api.close()
        for service in (downstream, healthy, slow, malformed):
            service.close()
    if failed or args.keep:
        print(f"logs, AOF and ledger kept in {run_dir}")
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
    return 1 if failed else 0


def push_missing(driver: Driver, healthy: Receiver) -> list[str]:
    out = []
    for job in driver.jobs:
        if job.kind == "push" and job.id and job.final in report.A2A_FINAL:
            states = {s for s, _ in healthy.states(job.id)}
            if report.A2A_FINAL[job.final] not in states:
                out.append(job.id)
    return out


def check(driver: Driver, api: Api, system: System, store: RedisStore, faults: list[Fault], healthy: Receiver,
          downstream: Downstream, run_dir: Path, t0: float, findings: report.Findings) -> report.Findings:
    blame = report.Attribution(faults, settle_s=2 * LEASE_S)
    bound_end = time.monotonic()
    ledger = report.ledger_counts(run_dir / "ledger.jsonl")
    ledger_by_job: dict[str, int] = {}
    for (job_id, _), count in ledger.items():
        if count > 1:
            ledger_by_job[job_id] = ledger_by_job.get(job_id, 0) + count - 1
    twice = downstream.applied_twice()
    for job in driver.jobs:
        if not job.id:
            findings.add("not_accepted", blame.kinds(job.started, job.started + RETRY_S),
                         f"{job.kind} job (key {job.key}, started at {job.started - t0:.0f}s): "
                         f"{'; '.join(job.notes) or 'no handle'}")
            continue
        end = job.final_at or bound_end
        kinds = blame.kinds(job.submitted, end)
        label = f"{job.kind} job {job.id} (submitted at {job.submitted - t0:.0f}s)"
        if job.final is None:
            response = api.call("GET", f"/v1/jobs/{job.id}", job.token, retry_s=10)
            if response is not None and response.status_code == 404:
                findings.add("lost", kinds, f"{label}: gone (404)")
            else:
                state = response.json().get("status") if response is not None and response.status_code == 200 else "?"
                findings.add("stuck", kinds, f"{label}: still {state}")
        elif job.final not in job.expected:
            findings.add("wrong_outcome", kinds, f"{label}: ended {job.final} ({job.error_type}), "
                                                 f"expected {sorted(job.expected)}")
        if job.cancel_conflict and job.final == "cancelled":
            findings.add("wrong_409", kinds, f"{label}: cancel answered 409 (already terminal), yet the job "
                                             "ended cancelled")
        if job.id in twice:
            findings.add("downstream_twice", kinds, f"{label}: {twice[job.id]} effect(s) under a second key",
                         twice[job.id])
        if job.id in ledger_by_job:
            findings.add("ledger_twice", kinds, f"{label}: {ledger_by_job[job.id]} extra ledger line(s)",
                         ledger_by_job[job.id])
        if job.kind == "push" and job.final in report.A2A_FINAL:
            updates = healthy.states(job.id)
            if report.A2A_FINAL[job.final] not in {s for s, _ in updates}:
                findings.add("push_missed", kinds, f"{label}: healthy receiver never got {job.final} "
                                                   f"(got {[s for s, _ in updates]}; other config {job.push_extra})")
            why = report.out_of_order(updates)
            if why:
                findings.add("push_out_of_order", kinds, f"{label}: {why}")
    for job, ids in driver.duplicate_jobs:
        findings.add("duplicate_jobs", blame.kinds(job.submitted, job.submitted + 1),
                     f"one Idempotency-Key gave {len(ids)} jobs: {sorted(ids)}", len(ids) - 1)
    for answer in api.server_errors:
        findings.add("server_errors", blame.kinds(answer.at, answer.at), f"{answer.status} on {answer.path} "
                                                                        f"at {answer.at - t0:.0f}s")
    for event in system.events:
        if "left down" in event.what:
            findings.add("stayed_down", blame.kinds(event.at, event.at), f"{event.process} at {event.at - t0:.0f}s: "
                                                                         f"{event.what}")
    down_now = system.processes_down()
    for what in down_now:
        if not any(e.process == what and "left down" in e.what for e in system.events):
            findings.add("stayed_down", [], f"{what} not running at the end")
    for fault in faults:
        if fault.recovery_s is None:
            findings.add("not_recovered", [fault.kind], f"{fault.kind} at {fault.started - t0:.0f}s: "
                                                        f"{fault.probe_error or 'no probe'}")
    try:
        missing_ttl = report.keys_without_ttl(store.redis, PREFIX)
    except StoreUnavailable:
        missing_ttl = ["(Redis unreachable at the end)"]
    except Exception as exc:
        missing_ttl = [f"(scan failed: {exc!r})"]
    findings.keys_without_ttl = len(missing_ttl)
    for key in missing_ttl[:5]:
        findings.examples["keys_without_ttl"].append(key)
    return findings
