"""ScheduleService: recurring jobs, the semantics every adapter and the command line share.

define (201 / the same again 200 / another body 409) · get · list · delete · pause · resume · jobs, each
on the caller's own schedules only (another owner's reads exactly like a missing one), and `fire`, the one
place where a tick becomes a job. Declared schedules (`tasks_backend.schedule(...)` in a job module) are
put in place by `declare` when a worker or a sweeper starts.
"""

from __future__ import annotations

import builtins
import contextlib
import secrets
from collections.abc import Iterable
from typing import Any

from ..access.auth import Principal
from ..errors import (
    BadRequest,
    IdempotencyConflict,
    InvalidParams,
    ScheduleConflict,
    ScheduleLimitReached,
    ScheduleNotFound,
    UnknownOperation,
)
from ..model.domain import JobRecord
from ..model.schedules import Schedule, ScheduleSpec, check_spec
from ..running.declared import DeclaredSchedule
from ..running.ticker import Ticker
from ..store.schedules import ScheduleStore
from .cursors import decode_cursor, decode_schedule_cursor, encode_cursor, encode_schedule_cursor
from .jobs import JobService
from .reads import MAX_PAGE, as_principal


class ScheduleService:
    def __init__(self, jobs: JobService) -> None:
        self.jobs = jobs
        self.store = ScheduleStore(jobs.store)

    def check(self, body: Any) -> ScheduleSpec:
        """The body checked field by field; the params against the operation, as a submit checks them."""
        def load_params(operation: str, params: Any) -> dict[str, Any]:
            try:
                spec = self.jobs.registry.get(operation)
            except UnknownOperation as exc:
                exc.extra.setdefault("errors", {"operation": ["must name a registered operation"]})
                raise
            try:
                return spec.dump_params(spec.load_params(params))
            except InvalidParams as exc:
                exc.extra.setdefault("errors", {"params": [exc.detail]})
                raise

        return check_spec(body, load_params)

    def define(self, who: Principal | str, body: Any, *, replace: bool = False,
               capped: bool = True) -> tuple[Schedule, bool]:
        """(the schedule, True if made now). The same definition again is the schedule as it stands;
        another raises `ScheduleConflict` (or, with `replace`, takes its place). A new name while the owner has
        `max_schedules` raises `ScheduleLimitReached` (`capped`; declared schedules are not)."""
        owner = as_principal(who).name
        spec = self.check(body)
        now = self.store.now_ms()
        most = self.jobs.settings.max_schedules if capped else 0
        outcome, _ = self.store.put(owner, spec, generation=secrets.token_hex(8), anchor_ms=now,
                                    next_ms=spec.next_after(now, now), replace=replace, most=max(0, most),
                                    declared=not capped)
        if outcome == "conflict":
            raise ScheduleConflict()
        if outcome == "limit":
            raise ScheduleLimitReached(f"This principal has {most} schedules, as many as it may define; "
                                       "delete one first.", extra={"limit": most})
        if outcome in ("created", "replaced"):
            self._audit(owner, "schedule.create" if outcome == "created" else "schedule.replace", spec.name)
        return self.get(owner, spec.name), outcome in ("created", "replaced")

    def get(self, who: Principal | str, name: str) -> Schedule:
        found = self.store.get(as_principal(who).name, name) if isinstance(name, str) else None
        if found is None:
            raise ScheduleNotFound()
        return found

    def list(self, who: Principal | str) -> list[Schedule]:
        owner = as_principal(who).name
        names = self.store.names(owner)
        return [s for s in self.store.get_many([(owner, n) for n in names]) if s is not None]

    def page(self, who: Principal | str, *, limit: int = 50,
             cursor: str | None = None) -> tuple[builtins.list[Schedule], str | None]:
        """The caller's schedules, oldest first, `limit` at a time: (a page, the cursor of the next or None)."""
        owner = as_principal(who).name
        if not 1 <= limit <= MAX_PAGE:
            raise BadRequest(f"The limit must be between 1 and {MAX_PAGE}.")
        position = decode_schedule_cursor(cursor) if cursor else None
        out: builtins.list[tuple[tuple[float, str], Schedule]] = []
        while rows := self.store.names_page(owner, position, limit + 1):
            for (name, created), schedule in zip(rows, self.store.get_many([(owner, n) for n, _ in rows]),
                                                 strict=True):
                position = (created, name)
                if schedule is None:  # expired: its name stays until a limit's prune drops it
                    continue
                if len(out) == limit:
                    return [s for _, s in out], encode_schedule_cursor(*out[-1][0])
                out.append((position, schedule))
        return [s for _, s in out], None

    def delete(self, who: Principal | str, name: str) -> None:
        """Stops its future ticks; the jobs it made stay."""
        owner = as_principal(who).name
        if not self.store.delete(owner, name):
            raise ScheduleNotFound()
        self._audit(owner, "schedule.delete", name)

    def pause(self, who: Principal | str, name: str) -> Schedule:
        owner = as_principal(who).name
        if not self.store.set_paused(owner, name, True):
            raise ScheduleNotFound()
        self._audit(owner, "schedule.pause", name)
        return self.get(owner, name)

    def resume(self, who: Principal | str, name: str) -> Schedule:
        """Ticks from now on: those that fell while paused get nothing."""
        owner = as_principal(who).name
        schedule = self.get(owner, name)
        now = self.store.now_ms()
        following = schedule.spec.next_after(now, schedule.anchor_ms)
        if not self.store.set_paused(owner, name, False, following if schedule.paused else None):
            raise ScheduleNotFound()
        self._audit(owner, "schedule.resume", name)
        return self.get(owner, name)

    def _audit(self, owner: str, action: str, name: str) -> None:
        # A schedule is changed only by its owner: the owner is who acted.
        self.jobs.audit.record(owner, action, target=name, owner=owner)

    def jobs_of(self, who: Principal | str, name: str, *, limit: int = 50,
                cursor: str | None = None) -> tuple[builtins.list[JobRecord], str | None]:
        """The jobs the schedule `name` made that the caller owns, newest tick first (also after the
        schedule was deleted, while the jobs live)."""
        owner = as_principal(who).name
        if not 1 <= limit <= MAX_PAGE:
            raise BadRequest(f"The limit must be between 1 and {MAX_PAGE}.")
        position = decode_cursor(cursor) if cursor else None
        out: builtins.list[JobRecord] = []
        last: tuple[float, str] | None = None
        while page := self.store.jobs_page(owner, name, position, limit + 1):
            records = self.jobs.store.get_many([job_id for job_id, _ in page])
            self.store.forget_jobs(owner, name, [i for (i, _), r in zip(page, records, strict=True) if r is None])
            for (job_id, score), record in zip(page, records, strict=True):
                if record is None or record.owner != owner:
                    continue
                if len(out) == limit:
                    assert last is not None
                    return out, encode_cursor(*last)
                out.append(record)
                last = (score, job_id)
            position = (page[-1][1], page[-1][0])
        return out, None

    # -- ticks ---------------------------------------------------------------------------------------
    def fire(self, schedule: Schedule, tick_ms: int) -> str:
        """The one place where a tick becomes a job: the same tick always gives the same job (its
        idempotency key is the schedule's generation and the tick, under the owner)."""
        spec = schedule.spec
        key = f"schedule:{spec.name}:{schedule.generation}:{tick_ms}"
        try:
            record, _ = self.jobs.submit(schedule.owner, spec.operation, spec.params, idempotency_key=key,
                                         priority=spec.priority)
        except IdempotencyConflict:
            # The key is this tick's alone: the job under it is the tick's, made by an earlier pass whose request
            # reads otherwise now (a release since that stores params differently, say). Left pending, the tick
            # would hold the schedule until that job expired, and then get a second one.
            held = self.jobs.store.idempotency_value(schedule.owner, key)
            made = self.jobs.store.get(held.partition(" ")[0]) if held else None
            if made is None or made.owner != schedule.owner:
                raise
            return made.id
        return record.id

    def ticker(self, **options: Any) -> Ticker:
        return Ticker(self.store, self.fire, **options)

    def declare(self, declared: Iterable[DeclaredSchedule]) -> builtins.list[Schedule]:
        """Put schedules declared in code in place: made if missing, left alone if unchanged, replaced if
        their definition changed (the code is their source); idempotent, so every process may call it."""
        out = []
        for item in declared:
            with contextlib.suppress(ScheduleConflict):
                out.append(self.define(item.owner, item.body(), replace=True, capped=False)[0])
        return out
