"""The checks of the kinds that depend on time or on other jobs: every completed job applied its effects,
delayed jobs did not start early, parked sleeps were not cut short, parents and their children agree.

Times come from the harness alone: when a job's client began to submit it, and when the downstream (in
the harness) first received each effect, both on its monotonic clock. A job delayed `d` is created after
its client began, so its first effect may not arrive before that moment plus `d`; a sleep's end is set
after its first effect arrived, so the second may not arrive sooner than the sleep's length after it. A
worker's skewed clock cannot move either bound.
"""

from __future__ import annotations

import time

from .driver import TERMINAL, Api, Driver, Tracked
from .report import Attribution, Findings
from .services import Downstream

EPSILON_S = 0.05  # the wall clock (Redis's) against the monotonic one, over seconds


def _label(job: Tracked, t0: float) -> str:
    return f"{job.kind} job {job.id} (submitted at {job.submitted - t0:.0f}s)"


def timing(driver: Driver, downstream: Downstream, findings: Findings, blame: Attribution, t0: float) -> list[str]:
    """Effects applied, delayed starts, parked sleeps; lines for the report."""
    late: list[float] = []
    naps = parked = 0
    for job in driver.jobs:
        if not job.id or job.final != "completed":
            continue
        kinds, label = blame.kinds(job.submitted, job.final_at or time.monotonic()), _label(job, t0)
        missing = [s for s in job.effects if downstream.first(job.id, s) is None]
        if missing:
            findings.add("effect_missing", kinds, f"{label}: completed, but never applied {missing}")
        first = downstream.first(job.id, "s0")
        if job.delay_s and first is not None:
            due = job.started + job.delay_s
            if first < due - EPSILON_S:
                findings.add("too_early", kinds, f"{label}: delayed {job.delay_s:.2f}s, its first effect came "
                                                 f"{due - first:.2f}s early")
            late.append(first - due)
        if job.sleep_s:
            naps += 1
            parked += job.parked
            after = downstream.first(job.id, "s1")
            if first is not None and after is not None and after - first < job.sleep_s - EPSILON_S:
                findings.add("too_early", kinds, f"{label}: slept {after - first:.2f}s of {job.sleep_s:.2f}s")
    out = [f"sleeping jobs: {naps} completed, {parked} of them seen parked (suspended) by the watcher"]
    if late:
        late.sort()
        out.append(f"delayed jobs: {len(late)} completed; first effect after its time by at most "
                   f"{late[len(late) // 2]:.2f}s (median), {late[-1]:.2f}s (max), submit latency included")
    return out


def family(driver: Driver, api: Api, findings: Findings, blame: Attribution, t0: float) -> list[str]:
    """Each parent's children: listed under it with its `parentId`, as many as it asked for, each run and
    finished, and the parent's result made of theirs in order. The children join the driver's jobs, so the
    common checks (lost, stuck, effects applied once) cover them too. Lines for the report."""
    parents = [j for j in driver.jobs if j.kind == "parent" and j.id]
    count = 0
    for job in parents:
        kinds, label = blame.kinds(job.submitted, job.final_at or time.monotonic()), _label(job, t0)
        response = api.call("GET", f"/v1/jobs?parent={job.id}&limit=200", job.token, retry_s=30)
        if response is None or response.status_code != 200:
            findings.add("family_wrong", kinds, f"{label}: children not listed "
                                                f"({None if response is None else response.status_code})")
            continue
        listed = {str(h["taskId"]): h for h in response.json()["jobs"]}
        count += len(listed)
        wanted, steps = job.spawn
        for child_id, handle in listed.items():
            if handle.get("parentId") != job.id:
                findings.add("family_wrong", kinds, f"{label}: child {child_id} has parentId "
                                                    f"{handle.get('parentId')!r}")
            status = str(handle["status"])
            child = Tracked("child", f"child-of-{job.id}", job.token, frozenset({"completed"}), id=child_id,
                            started=job.submitted, submitted=job.submitted,
                            effects=tuple(f"s{i}" for i in range(steps)), parent_id=job.id,
                            final=status if status in TERMINAL else None,
                            final_at=(job.final_at or time.monotonic()) if status in TERMINAL else 0.0)
            with driver.lock:
                driver.jobs.append(child)
        if len(listed) != wanted:
            findings.add("family_wrong", kinds, f"{label}: {len(listed)} children listed, it spawned {wanted}")
        if job.final != "completed":
            continue
        body = api.call("GET", f"/v1/jobs/{job.id}", job.token, retry_s=30)
        result = body.json().get("result") if body is not None and body.status_code == 200 else None
        ids, results = (result or {}).get("children"), (result or {}).get("results")
        if not isinstance(ids, list) or not isinstance(results, list) or set(ids) != set(listed) \
                or len(ids) != len(set(ids)) or len(results) != len(ids):
            findings.add("family_wrong", kinds, f"{label}: result {result} does not match its children "
                                                f"{sorted(listed)}")
            continue
        for child_id, value in zip(ids, results, strict=True):
            answer = api.call("GET", f"/v1/jobs/{child_id}", job.token, retry_s=30)
            got = answer.json() if answer is not None and answer.status_code == 200 else {}
            if got.get("status") != "completed" or got.get("result") != value:
                findings.add("family_wrong", kinds, f"{label}: child {child_id} is {got.get('status')} with "
                                                    f"{got.get('result')}, the parent got {value}")
    return [f"parent jobs: {len(parents)}, {sum(j.final == 'completed' for j in parents)} completed; "
            f"{count} children listed"] if parents else []
