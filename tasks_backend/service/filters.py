"""Which jobs a listing or a bulk action is about: the filter fields, read from a query string or a JSON object.

Fields combine (AND). `status` takes one wire status or several, comma-separated; `createdAfter` and
`createdBefore` are RFC 3339 times; `owner` (a principal, or `*` for every owner) needs the operator or admin role:
from anyone else it is a 400, whoever it names. An unknown field is a 400 naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..access.auth import Principal
from ..errors import BadRequest
from ..model.domain import JobRecord, JobState
from ..model.states import STATES_FOR_STATUS
from ..model.timing import parse_run_at

#: Every filter field, by its wire name.
FIELDS = ("status", "operation", "createdAfter", "createdBefore", "schedule", "parent", "owner")
#: `owner` naming every owner.
ALL_OWNERS = "*"


@dataclass(frozen=True)
class JobFilter:
    states: frozenset[JobState] | None = None
    operation: str | None = None
    created_after_ms: int | None = None
    created_before_ms: int | None = None
    schedule: str | None = None
    parent: str | None = None
    #: Whose jobs: None the caller's own, ALL_OWNERS every owner's, else one owner's.
    owner: str | None = None

    def keeps(self, record: JobRecord) -> bool:
        """Whether the record passes every field but `owner` and `parent` (which choose the index read)."""
        return ((self.states is None or record.state in self.states)
                and (self.operation is None or record.operation == self.operation)
                and (self.created_after_ms is None or record.created_ms > self.created_after_ms)
                and (self.created_before_ms is None or record.created_ms < self.created_before_ms)
                and (self.schedule is None or record.schedule == self.schedule)
                and (self.parent is None or record.parent_id == self.parent))

    def wire(self) -> dict[str, Any]:
        """The filter as a JSON object `parse_filter` reads back (a bulk job's params carry it)."""
        out: dict[str, Any] = {}
        if self.states is not None:
            out["status"] = ",".join(sorted({s for s, states in STATES_FOR_STATUS.items() if states <= self.states}))
        for name, value in (("operation", self.operation), ("schedule", self.schedule), ("parent", self.parent),
                            ("owner", self.owner)):
            if value is not None:
                out[name] = value
        if self.created_after_ms is not None:
            out["createdAfterMs"] = self.created_after_ms
        if self.created_before_ms is not None:
            out["createdBeforeMs"] = self.created_before_ms
        return out


def parse_states(value: Any) -> frozenset[JobState] | None:
    if value is None:
        return None
    names = value if isinstance(value, list) else str(value).split(",")
    states: set[JobState] = set()
    for name in names:
        name = str(name).strip()
        if name not in STATES_FOR_STATUS:
            raise BadRequest(f"Unknown status {name!r}; use one of {sorted(STATES_FOR_STATUS)}.",
                             extra={"field": "status"})
        states |= STATES_FOR_STATUS[name]
    return frozenset(states)


def _text(fields: Mapping[str, Any], name: str) -> str | None:
    value = fields.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise BadRequest(f"`{name}` must be a non-empty string.", extra={"field": name})
    return value


def parse_filter(fields: Mapping[str, Any], principal: Principal, *, internal: bool = False) -> JobFilter:
    """A filter from wire fields; `internal` also takes the millisecond forms `wire` writes."""
    allowed = set(FIELDS) | ({"createdAfterMs", "createdBeforeMs"} if internal else set())
    unknown = sorted(set(fields) - allowed)
    if unknown:
        raise BadRequest(f"Unknown filter field{'s' * (len(unknown) > 1)}: {', '.join(unknown)}; "
                         f"use {', '.join(FIELDS)}.", extra={"fields": unknown})
    owner = _text(fields, "owner")
    if owner is not None and not (principal.operator or principal.admin):
        raise BadRequest("The `owner` filter needs the operator or admin role.", extra={"field": "owner"})
    if owner == principal.name:
        owner = None
    after = parse_run_at(fields.get("createdAfter"), "createdAfter")
    before = parse_run_at(fields.get("createdBefore"), "createdBefore")
    if internal:
        after = after if after is not None else fields.get("createdAfterMs")
        before = before if before is not None else fields.get("createdBeforeMs")
    return JobFilter(states=parse_states(fields.get("status")), operation=_text(fields, "operation"),
                     created_after_ms=after, created_before_ms=before, schedule=_text(fields, "schedule"),
                     parent=_text(fields, "parent"), owner=owner)
