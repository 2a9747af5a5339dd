"""When a job may start and how it ranks: `runAt`, `delayMs` and `priority` as every protocol takes them.

Rule: pure checks; a bad value is an `InvalidParams` that names the field by its wire name.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidParams
from .domain import DEFAULT_PRIORITY

#: The wire names, in every protocol (HTTP body fields, MCP `_meta` and A2A message `metadata` keys).
RUN_AT, DELAY_MS, PRIORITY = "runAt", "delayMs", "priority"
MIN_PRIORITY, MAX_PRIORITY = 0, 9
#: RFC 3339's date-time (section 5.6): Python's ISO 8601 parser also takes forms it does not have (basic format,
#: week dates, no seconds, an hour-only offset), which another client of the same API would refuse.
RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})")


def _bad(name: str, message: str) -> InvalidParams:
    return InvalidParams(f"`{name}`: {message}", extra={"errors": {name: [message]}})


@dataclass(frozen=True)
class Timing:
    """A submit's start time (absolute ms, or ms from now) and priority; None: not given."""

    run_at_ms: int | None = None
    delay_ms: int | None = None
    priority: int | None = None

    def check(self, ttl_ms: int, now_ms: int) -> None:
        """Refuse both a time and a delay, a priority out of range, and a start the job's TTL does not reach."""
        if self.run_at_ms is not None and (isinstance(self.run_at_ms, bool) or not isinstance(self.run_at_ms, int)):
            raise _bad(RUN_AT, "must be a time in whole milliseconds since the epoch.")  # the in-process API's
        if self.run_at_ms is not None and self.delay_ms is not None:
            raise _bad(DELAY_MS, f"give `{RUN_AT}` or `{DELAY_MS}`, not both.")
        if self.delay_ms is not None and (isinstance(self.delay_ms, bool) or not isinstance(self.delay_ms, int)
                                          or self.delay_ms < 0):
            raise _bad(DELAY_MS, "must be an integer of 0 or more (milliseconds).")
        if self.priority is not None and (isinstance(self.priority, bool) or not isinstance(self.priority, int)
                                          or not MIN_PRIORITY <= self.priority <= MAX_PRIORITY):
            raise _bad(PRIORITY, f"must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}.")
        if self.delay_ms is not None and self.delay_ms >= ttl_ms:
            raise _bad(DELAY_MS, f"the job would start after its retention ({ttl_ms} ms) ends.")
        if self.run_at_ms is not None and self.run_at_ms - now_ms >= ttl_ms:
            raise _bad(RUN_AT, f"the job would start after its retention ({ttl_ms} ms) ends.")

    @property
    def rank(self) -> int:
        return DEFAULT_PRIORITY if self.priority is None else self.priority

    def identity(self) -> list[int | None]:
        """What makes two submits' timing differ, for an idempotency key's request hash (a delay of 0 is none, and
        no priority the default one)."""
        return [self.run_at_ms, self.delay_ms or 0, self.rank]


def parse_run_at(value: Any, name: str = RUN_AT) -> int | None:
    """An RFC 3339 time (with a zone offset or `Z`) as ms since the epoch; None stays None."""
    if value is None:
        return None
    if not isinstance(value, str) or not RFC3339.fullmatch(value):
        raise _bad(name, "must be an RFC 3339 time with its offset, such as 2026-01-01T12:00:00Z.")
    # RFC 3339 has a 60th second (a leap second), which Python's parser refuses: read as the 59th, one second on.
    leap = value[17:19] == "60"
    try:
        parsed = dt.datetime.fromisoformat((value[:17] + "59" + value[19:] if leap else value).upper().replace(
            "Z", "+00:00"))
    except ValueError:  # the right shape, not a real time (a 13th month, a 25th hour)
        raise _bad(name, "must be an RFC 3339 time with its offset, such as 2026-01-01T12:00:00Z.") from None
    return int(parsed.timestamp() * 1000) + (1000 if leap else 0)


def as_whole(value: Any) -> Any:
    """JSON numbers: 2.0 is the integer 2 (A2A's protobuf numbers are all doubles, and JavaScript has no other
    kind); anything else is left for the caller's check."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _whole(value: Any, name: str, what: str) -> int | None:
    """`as_whole`, with 2.5 and "2" refused."""
    if value is None:
        return None
    value = as_whole(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(name, what)
    return value


def from_wire(fields: dict[str, Any], names: tuple[str, str, str] = (RUN_AT, DELAY_MS, PRIORITY)) -> Timing:
    """The timing a request's fields carry, under `names` (runAt, delayMs, priority), each checked for its type."""
    run_at, delay, priority = names
    return Timing(parse_run_at(fields.get(run_at), run_at),
                  _whole(fields.get(delay), delay, "must be an integer of 0 or more (milliseconds)."),
                  _whole(fields.get(priority), priority, f"must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}."))
