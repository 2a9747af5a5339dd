"""Recurring jobs in the soak: a few schedules made before the faults begin, paused once every fault is
injected, and their ticks checked at the end.

The ticks a schedule made are read from its index in Redis (job id -> tick, what `GET /v1/jobs?schedule=`
pages through); the jobs are those the API lists; the ledger shows every `soak.tick` job that really ran,
with its schedule's name, whether listed or not. Ticks are on Redis's clock, which is this machine's clock
(only workers get a skewed one); they are compared with the fault windows through the wall clock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
from collections import Counter
from pathlib import Path

from tasks_backend.errors import StoreUnavailable
from tasks_backend.store.jobs import RedisStore
from tasks_backend.store.schedules import ScheduleStore

from .driver import TERMINAL, Api, Driver, Tracked
from .faults import Fault
from .report import Attribution, Findings

PERIODS_S = (2, 3, 5)
#: The faults during which no ticker can make a job: the sweeper is dead, or Redis is out of its reach.
STOPS_TICKING = frozenset({"sweeper_kill", "redis_restart", "redis_stall", "proxy_cut", "proxy_drop"})
#: After such a fault is put back, ticks may still be missed for: the supervisor's 1 s backoff, the sweeper's
#: start-up on a loaded machine, and the 5 s lease a killed ticker left on a schedule's due entry.
RECOVER_S = 15.0
#: A tick this much older than the pause must have its job (a younger one may fall to the pause).
SETTLE_MS = 5000


@dataclasses.dataclass
class Sched:
    name: str
    period_s: int
    first_ms: int = 0  # its first tick (`nextRunAt` when made)
    created: bool = False


def _ms(value: str) -> int:
    return int(dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)


class Schedules:
    def __init__(self, api: Api, token: str, owner: str, store: RedisStore) -> None:
        self.api, self.token, self.owner = api, token, owner
        self.store = ScheduleStore(store)
        self.scheds = [Sched(f"soak-every-{p}s", p) for p in PERIODS_S]
        self.paused_ms = 0
        self.notes: list[str] = []
        self.wall_offset = time.time() - time.monotonic()  # wall seconds = monotonic + this

    def mono(self, ms: float) -> float:
        return ms / 1000 - self.wall_offset

    def create(self) -> None:
        for s in self.scheds:
            body = {"name": s.name, "operation": "soak.tick", "params": {"schedule": s.name},
                    "everySeconds": s.period_s}
            response = self.api.call("POST", "/v1/schedules", self.token, json=body)
            if response is None or response.status_code not in (200, 201):
                self.notes.append(f"schedule {s.name} not made: {None if response is None else response.text[:200]}")
                continue
            s.first_ms, s.created = _ms(response.json()["nextRunAt"]), True

    def pause(self) -> None:
        self.paused_ms = int(time.time() * 1000)
        for s in self.scheds:
            response = self.api.call("POST", f"/v1/schedules/{s.name}/pause", self.token)
            if response is None or response.status_code != 200:
                self.notes.append(f"schedule {s.name} not paused: {None if response is None else response.text[:200]}")

    def ticks(self, s: Sched) -> list[tuple[str, float]]:
        """(job id, tick ms) of every job the schedule made, from its index (retrying while Redis is away)."""
        deadline = time.monotonic() + 30
        while True:
            try:
                return self.store.jobs_page(self.owner, s.name, None, 100_000)
            except StoreUnavailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def track(self, driver: Driver) -> None:
        """Add each scheduled job not yet watched to the driver's jobs (so the drain and the common checks,
        lost, stuck, wrong end, effects applied once, cover them)."""
        with driver.lock:
            known = {j.id for j in driver.jobs if j.kind == "scheduled"}
        for s in self.scheds:
            for job_id, tick in self.ticks(s):
                if job_id not in known:
                    at = self.mono(tick)
                    job = Tracked("scheduled", f"{s.name}@{int(tick)}", self.token, frozenset({"completed"}),
                                  id=job_id, started=at, submitted=at, effects=("s0",))
                    with driver.lock:
                        driver.jobs.append(job)

    def listed(self, s: Sched) -> dict[str, str]:
        """Job id -> status, of every job `GET /v1/jobs?schedule=` lists (all pages)."""
        out: dict[str, str] = {}
        cursor = None
        while True:
            path = f"/v1/jobs?schedule={s.name}&limit=200" + (f"&cursor={cursor}" if cursor else "")
            response = self.api.call("GET", path, self.token)
            if response is None or response.status_code != 200:
                raise RuntimeError(f"listing {s.name}: {None if response is None else response.status_code}")
            body = response.json()
            out.update({str(j["taskId"]): str(j["status"]) for j in body["jobs"]})
            if not (cursor := body.get("nextCursor")):
                return out

    def check(self, findings: Findings, faults: list[Fault], ledger: Path, blame: Attribution) -> list[str]:
        """One job per tick, none twice, none missed beyond what a fault explains; lines for the report."""
        ran: dict[str, set[str]] = {s.name: set() for s in self.scheds}
        if ledger.exists():
            for line in ledger.read_text().splitlines():
                entry = json.loads(line)
                if entry.get("schedule") in ran:
                    ran[entry["schedule"]].add(entry["job"])
        stops = [f for f in faults if f.kind in STOPS_TICKING and f.started]
        out = list(self.notes)
        for s in (s for s in self.scheds if s.created):
            period_ms = s.period_s * 1000
            made = self.ticks(s)
            listed = self.listed(s)
            label = f"schedule {s.name}"
            for tick, count in Counter(t for _, t in made).items():
                if count > 1:
                    findings.add("tick_twice", blame.kinds(self.mono(tick), self.mono(tick)),
                                 f"{label}: {count} jobs for the tick at {tick:.0f}", count - 1)
            for job_id, tick in made:
                if (tick - s.first_ms) % period_ms:
                    findings.add("tick_twice", blame.kinds(self.mono(tick), self.mono(tick)),
                                 f"{label}: job {job_id} for {tick:.0f}, not a tick of the schedule")
            unlisted = ran[s.name] - set(listed)
            for job_id in sorted(unlisted):
                findings.add("tick_twice", [], f"{label}: job {job_id} ran a tick's effect but is not listed")
            have = {int(t) for _, t in made}
            missed, explained, after = 0, Counter[str](), 0.0
            tick = s.first_ms
            while tick <= self.paused_ms - SETTLE_MS:
                if tick not in have:
                    at = self.mono(tick)
                    during = [f for f in stops if f.started - s.period_s - 1 <= at <= f.ended + RECOVER_S]
                    if during:
                        explained[during[-1].kind] += 1
                        after = max(after, at - during[-1].ended)
                    else:
                        missed += 1
                        findings.add("tick_missed", blame.kinds(at - s.period_s, at + s.period_s),
                                     f"{label}: no job for the tick at {tick} (no outage of the ticker then)")
                tick += period_ms
            open_ = [i for i, status in listed.items() if status not in TERMINAL]
            records = self.store.store.get_many([i for i, _ in made])
            late = [r.created_ms - t for (_, t), r in zip(made, records, strict=True) if r is not None]
            out.append(f"{label} (every {s.period_s}s): {len(made)} ticks made jobs, {len(listed)} listed, "
                       f"{len(ran[s.name])} ran; {explained.total()} missed during a ticker outage "
                       f"({', '.join(f'{k} {n}' for k, n in sorted(explained.items())) or '-'}; the last {after:.1f}s "
                       "after its fault was put back; catchUp latest), "
                       f"{missed} missed otherwise; {len(open_)} not finished; job made at most "
                       f"{max(late, default=0) / 1000:.1f}s after its tick")
        return out
