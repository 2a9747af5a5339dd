"""Recurring jobs: a schedule's definition, its checks, and when it ticks (pure functions, no I/O).

A schedule runs `operation` with `params` at every tick of a cron expression (`cronsim`, in an IANA time
zone through `zoneinfo`, so daylight saving time moves the ticks as wall clocks do) or every N seconds from
its creation. A tick seen late by more than `grace_ms` is missed; `catchUp` says what missed ticks get.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..errors import InvalidParams
from .timing import as_whole

CATCH_UP = ("none", "latest", "all")
#: A tick seen later than this after its time is missed (and later than half its period, for short periods).
GRACE_MS = 5000
#: `catchUp: "all"` makes at most this many jobs for the ticks missed in one stop (the latest ones).
MAX_CATCH_UP = 100
#: How far back a catch-up looks for a change of the clocks (no zone moves them more than two hours at once).
CLOCK_CHANGE_MS = 3 * 3600 * 1000
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
FIELDS = ("name", "operation", "params", "cron", "everySeconds", "timezone", "catchUp", "priority")


def bad(name: str, problem: str) -> InvalidParams:
    """A 422 that names the field at fault (as params' errors do: `errors: {field: [problem]}`)."""
    return InvalidParams(f"`{name}` {problem}.", extra={"errors": {name: [problem]}})


@dataclass(frozen=True)
class ScheduleSpec:
    """What a caller asks for: the body of `POST /v1/schedules`, checked, with its defaults filled in."""

    name: str
    operation: str
    params: dict[str, Any] = field(default_factory=dict)
    cron: str | None = None
    every_s: int | None = None
    timezone: str = "UTC"
    catch_up: str = "latest"
    priority: int = 5

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "operation": self.operation, "params": self.params}
        if self.cron is not None:
            out["cron"] = self.cron
        else:
            out["everySeconds"] = self.every_s
        out.update({"timezone": self.timezone, "catchUp": self.catch_up, "priority": self.priority})
        return out

    def next_after(self, t_ms: int, anchor_ms: int) -> int:
        """The first tick strictly after `t_ms` (ticks of `everySeconds` fall at `anchor_ms` + k periods)."""
        if self.every_s is not None:
            period = self.every_s * 1000
            return anchor_ms + ((t_ms - anchor_ms) // period + 1) * period
        assert self.cron is not None
        start = datetime.fromtimestamp(t_ms / 1000, ZoneInfo(self.timezone))
        # From the second pass through an hour the clocks repeat, cronsim can answer a fixed time's first pass
        # (before `t_ms`): the next one after it is the tick.
        for moment in CronSim(self.cron, start):
            if (t := _ms(moment)) > t_ms:
                return t
        raise AssertionError("a cron expression's ticks never end")

    def ticks_up_to(self, now_ms: int, since_ms: int, anchor_ms: int, limit: int) -> list[int]:
        """The latest `limit` ticks in [since_ms, now_ms], newest first."""
        if since_ms > now_ms:
            return []
        if self.every_s is not None:
            period = self.every_s * 1000
            last = anchor_ms + (now_ms - anchor_ms) // period * period
            return list(range(last, since_ms - 1, -period)[:limit])  # a range's slice: no list of every tick
        assert self.cron is not None
        out: list[int] = []
        # The second added before the time is made local: added after, it would drop the `fold` of an hour the
        # clocks repeat, and the search would start an hour early.
        start = datetime.fromtimestamp(now_ms / 1000 + 1, ZoneInfo(self.timezone))
        for moment in CronSim(self.cron, start, reverse=True):
            t = _ms(moment)
            if t < since_ms or len(out) == limit:
                break
            if t <= now_ms:
                out.append(t)
        zone, early = ZoneInfo(self.timezone), max(since_ms, now_ms - CLOCK_CHANGE_MS)
        if _offset(early, zone) == _offset(now_ms, zone):
            return out
        # The clocks went back within the window: a tick in the first pass through the repeated hour is later on
        # the wall clock than a `now` in the second, and the reverse search, which walks the wall clock back, never
        # meets it. A walk forward in time over the window does.
        found, t = set(out), early - 1
        while (t := self.next_after(t, anchor_ms)) <= now_ms:
            found.add(t)
        return sorted(found, reverse=True)[:limit]


def _offset(t_ms: int, zone: ZoneInfo) -> timedelta | None:
    return datetime.fromtimestamp(t_ms / 1000, zone).utcoffset()


def _ms(moment: datetime) -> int:
    return int(moment.astimezone(UTC).timestamp() * 1000)


def plan(spec: ScheduleSpec, next_ms: int, now_ms: int, anchor_ms: int, *, paused: bool,
         held: tuple[int, int] | None = None) -> tuple[list[int], int]:
    """(ticks to make a job for, oldest first; the next run after `now_ms`) for a schedule due at `next_ms`.

    The latest due tick is on time if seen within `grace_ms` of it, and always gets its job; older ticks
    and a late latest one are missed: `none` skips them, `latest` makes one job for the newest of them,
    `all` one for each (the latest `MAX_CATCH_UP`). A paused schedule makes none and moves on.

    `held`: (when a ticker first took the schedule for this run, the end of a lease on it that lapsed), if a
    ticker took it and died (or failed) before moving it on. The ticks up to the lapse that fell no longer than
    the grace before that first taking are on time as well: they were seen in time, and the lease kept every
    other ticker away from them."""
    following = spec.next_after(now_ms, anchor_ms)
    if paused or next_ms > now_ms:
        return [], following if next_ms <= now_ms else next_ms
    due = spec.ticks_up_to(now_ms, next_ms, anchor_ms, MAX_CATCH_UP + 1)
    if not due:
        return [], following
    grace = grace_ms(following - due[0])
    fire = [t for i, t in enumerate(due) if (i == 0 and now_ms - t <= grace)
            or (held is not None and held[0] - grace <= t <= held[1])]
    missed = [t for t in due if t not in fire]
    if spec.catch_up == "latest":
        fire += missed[:1]
    elif spec.catch_up == "all":
        fire += missed[:MAX_CATCH_UP]
    return sorted(fire), following


def grace_ms(period_ms: int) -> int:
    """How late a tick may be seen and still be on time: `GRACE_MS`, or half the period (at least 1 s)."""
    return min(GRACE_MS, max(period_ms // 2, 1000))


def check_spec(body: Any, load_params: Any) -> ScheduleSpec:
    """The body of a schedule, checked field by field (each problem a 422 naming its field).

    `load_params(operation, params)` checks the params against the operation (raising `UnknownOperation`
    or `InvalidParams`) and returns them as stored."""
    if not isinstance(body, dict):
        raise InvalidParams("The body must be a JSON object.")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise bad(unknown[0], "is not a field of a schedule")
    name = body.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise bad("name", "must be 1 to 100 letters, digits, '.', '_' or '-', starting with a letter or digit")
    operation = body.get("operation")
    if not isinstance(operation, str) or not operation:
        raise bad("operation", "must name a registered operation")
    cron, every = body.get("cron"), as_whole(body.get("everySeconds"))
    if (cron is None) == (every is None):
        raise bad("cron", "or `everySeconds` must be given, not both")
    if cron is not None and not _cron_ok(cron):
        raise bad("cron", "is not a cron expression")
    if every is not None and (isinstance(every, bool) or not isinstance(every, int) or not 1 <= every <= 10**8):
        raise bad("everySeconds", "must be an integer from 1 to 100000000")
    def optional(field: str, default: Any) -> Any:  # null is the default, as for a job's optional fields
        value = body.get(field)
        return default if value is None else value

    timezone = optional("timezone", "UTC")
    if not isinstance(timezone, str) or not _zone_ok(timezone):
        raise bad("timezone", "must be an IANA time zone name, such as Europe/Paris")
    catch_up = optional("catchUp", "latest")
    if catch_up not in CATCH_UP:
        raise bad("catchUp", "must be one of none, latest, all")
    priority = as_whole(optional("priority", 5))
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9:
        raise bad("priority", "must be an integer from 0 to 9")
    params = load_params(operation, body.get("params"))
    return ScheduleSpec(name=name, operation=operation, params=params, cron=cron, every_s=every,
                        timezone=timezone, catch_up=catch_up, priority=priority)


def _cron_ok(cron: Any) -> bool:
    if not isinstance(cron, str) or not 0 < len(cron) <= 200 or len(cron.split()) != 5:
        return False
    try:
        next(CronSim(cron, datetime(2026, 1, 1, tzinfo=UTC)))
    except (CronSimError, StopIteration, ValueError, OverflowError):
        return False
    return True


#: Names a host's tz database may hold that are not one zone everywhere (the host's own setting). The zones that
#: count leap seconds (`right/`, ticks 27 s off the wall clock) are refused by their prefix.
HOST_ZONES = ("localtime", "posixrules")


def _zone_ok(name: str) -> bool:
    if not 0 < len(name) <= 64 or name.startswith(("/", ".", "right/")) or ".." in name or "\0" in name:
        return False
    if name in HOST_ZONES:
        return False
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


@dataclass(frozen=True)
class Schedule:
    """One schedule as stored: its spec, whose it is, and where its ticks stand (times are Redis ms)."""

    spec: ScheduleSpec
    owner: str
    #: Made afresh each time the name is (re)defined: part of each tick's idempotency key.
    generation: str
    anchor_ms: int
    next_ms: int
    paused: bool = False
    last_ms: int | None = None
    last_job_id: str | None = None
    #: Ticks claimed whose jobs may not all be made yet (the ticker finishes them first).
    pending: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        return self.spec.name

    def wire(self) -> dict[str, Any]:
        from .domain import rfc3339

        return {**self.spec.wire(), "paused": self.paused, "nextRunAt": rfc3339(self.next_ms),
                "lastRunAt": None if self.last_ms is None else rfc3339(self.last_ms),
                "lastJobId": self.last_job_id}
