"""The dispatch gate's cost: a submit with a priority and fair shares on against bare `apply_async`, and the
runner with fair shares on against the same runner with them off (`TASKS_BACKEND_FAIR_SHARES=0`)."""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import TYPE_CHECKING

from tasks_backend.config import Settings
from tasks_backend.service.runtime import build_runtime

from .load import Load
from .measures import Row, calls_note, cpu_note, drain_rate, fixed, median, warm

if TYPE_CHECKING:
    from .run import Bench


def measure(bench: Bench) -> None:
    """The submit row takes twice the plan's pairs of half its seconds, as the runner's rows do: this machine's
    speed moves under one side of a long pair by as much as the row's margin, and shorter pairs, taken in turn,
    give the median more of them to stand on in the same time."""
    body = json.dumps({"operation": "bench.noop", "params": {}, "priority": 7})
    ours = Load(bench.url["product"], method="POST", path="/v1/jobs", body=body,
                headers={**bench.auth(), "Content-Type": "application/json"})
    theirs = Load(bench.url["baseline"], method="POST", path="/jobs")
    warm(bench.plan, ours, theirs)
    halves = dataclasses.replace(bench.plan, reps=2 * bench.plan.reps, seconds=bench.plan.seconds / 2)
    bench.rows.append(bench.paired("submit POST /v1/jobs with a priority, fair shares on", "req/s",
                                   ">= 1.2x bare apply_async route", 1.2, halves, fixed(ours, halves),
                                   fixed(theirs, halves), lambda r: r.rps, settle=bench.purge_queues))
    bench.purge_queues()
    runner(bench)


def runner(bench: Bench) -> None:
    """No-op jobs drained by a fresh worker (prefork -c 2), with fair shares on and off, alternating. Twice the
    runner row's pairs of half its jobs: both sides cost about the same, and this machine's speed drifts by more
    than that over one long drain, so shorter alternating drains give the median more pairs to stand on.

    The row with a target drains one owner's jobs, the runner's everyday case: past the slots they skip the gate
    (a lone owner's bypass, `lib/gate.lua`). The second row drains two owners' jobs, submitted in turn, which the
    gate holds and releases one per run that ends, owner by owner: what fair shares cost when they have work to do.
    """
    drains(bench, ("bench",), "no-op jobs through the runner, fair shares on vs off", 0.95,
           ">= 0.95x the runner with fair shares off")
    drains(bench, ("bench", "bench-other"), "no-op jobs of two owners in turn through the runner, fair shares on vs "
           "off", None, "-")


def drains(bench: Bench, owners: tuple[str, ...], name: str, target: float | None, target_text: str) -> None:
    n, reps = bench.plan.runner_jobs // 2, 2 * bench.plan.runner_reps
    off = build_runtime(Settings.from_env({**bench.product_env, "TASKS_BACKEND_FAIR_SHARES": "0"}))
    services = {"product-worker": bench.runtime.service, "product-worker-fair-off": off.service}
    rates: dict[str, list[float]] = {name: [] for name in services}
    cpu: dict[str, list[dict[str, float]]] = {name: [] for name in services}
    calls: dict[str, list[dict[str, float]]] = {name: [] for name in services}
    scripts: dict[str, list[float]] = {name: [] for name in services}
    queue, db = bench.runtime.settings.queue, bench.db0
    bench.compact()
    for rep in range(reps):
        order = list(services) if rep % 2 == 0 else list(reversed(services))
        for worker in order:
            for i in range(n):
                services[worker].submit(owners[i % len(owners)], "bench.noop", {}, priority=5)
            db.config_resetstat()
            rate, per_job = drain_rate(functools.partial(bench.queue_length, db, queue), n,
                                       functools.partial(bench.up, worker), functools.partial(bench.cpu, worker))
            rates[worker].append(rate)
            cpu[worker].append(per_job)
            bench.wait_empty(db, queue)
            calls[worker].append(bench.redis_calls(n))
            scripts[worker].append(bench.redis_script_us(n))
            bench.down(worker)
    on, fair_off = rates["product-worker"], rates["product-worker-fair-off"]
    ratios = [a / b for a, b in zip(on, fair_off, strict=True)]
    sides = tuple(services)
    bench.rows.append(Row(name, "jobs/s", target_text, median(on), median(fair_off), median(ratios),
                          None if target is None else median(ratios) >= target,
                          note="CPU us per job, worker main/pool/Redis: "
                               + "; ".join(cpu_note(cpu[side]) for side in sides)
                               + ". Redis commands per job (the drain's own polling included): "
                               + "; ".join(calls_note(calls[side]) for side in sides)
                               + ". Redis us per job inside scripts, by its clock: "
                               + "; ".join(f"{median(scripts[side]):.0f}" for side in sides),
                          samples={"on": on, "off": fair_off, "ratio": ratios, "cpu_s_per_job": cpu,
                                   "redis_calls_per_job": calls, "redis_script_us_per_job": scripts}))
