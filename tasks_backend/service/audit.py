"""The audit trail: `Audit.record`, called where an action happens (once per action, for every protocol), and
`Audit.query`, what `GET /v1/audit` and the job page read.

An entry says who, what, about which job or schedule (and its owner), from which address, in which request, and
when (Redis's clock). It never holds params, answers' content, tokens or secrets: only a short `detail` such as
the question keys answered. Admins and operators read every entry; any other principal reads the entries about
their own jobs and schedules (and their own sign-ins). Actions: see `ACTIONS`.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import logging
from typing import Any

from ..access import request
from ..access.auth import Principal
from ..config import Settings, parse_duration
from ..errors import BadRequest, StoreUnavailable
from ..model.domain import rfc3339
from ..running.stats import JobStats
from ..store.audit import AuditEntry, AuditNotWritten, AuditStore
from ..store.jobs import RedisStore
from .cursors import valid_id
from .reads import MAX_PAGE, as_principal

log = logging.getLogger(__name__)

#: What is recorded, by action name. Other modules record theirs under these names too.
ACTIONS = ("job.cancel", "job.answer", "job.rerun", "jobs.bulk", "schedule.create", "schedule.replace",
           "schedule.delete", "schedule.pause", "schedule.resume", "push_config.set", "push_config.delete",
           "ui.sign_in")
#: Entries one query reads at most before it answers (with a cursor to go on from) however few matched.
SCAN_BUDGET = 5_000
_BATCH = 500


class Audit:
    def __init__(self, store: RedisStore, settings: Settings) -> None:
        self.entries = AuditStore(store)
        self._stats = JobStats(store)
        self.retention_ms = max(1, int(settings.audit_retention_s * 1000))

    def record(self, principal: Principal | str, action: str, *, job_id: str | None = None,
               target: str | None = None, detail: str | None = None, owner: str | None = None) -> None:
        """Write one entry: `principal` did `action` on job `job_id` (or on `target`: a schedule's name, a push
        config's id, a new job's id) belonging to `owner`. The address and request id are the current request's.

        Called after the action took effect: a failure to write is logged (what, by whom, on what: never the
        detail) and counted (`tasks_backend_audit_write_failures` in /metrics), never turned into a failed answer
        to an action that was done."""
        name = as_principal(principal).name
        context = request.current()
        fields = {"principal": name, "action": action, "job_id": job_id or "", "target": target or "",
                  "owner": owner or "", "detail": detail or "",
                  "address": context.address if context else "", "request_id": context.request_id if context else ""}
        try:
            self.entries.append(fields, retention_ms=self.retention_ms)
        except (StoreUnavailable, AuditNotWritten) as exc:
            why = exc.reason if isinstance(exc, AuditNotWritten) else "the store is unreachable"
            log.error("audit entry not written: %s by %s (job %s, %s, request %s): %s", action, name, job_id or "-",
                      target or "-", fields["request_id"] or "-", why)
            self._stats.add_counts("audit", {"write_failures": 1})

    def query(self, who: Principal | str, *, job: str | None = None, principal: str | None = None,
              since: str | None = None, cursor: str | None = None,
              limit: int = 50) -> tuple[list[AuditEntry], str | None]:
        """Entries the caller may read, newest first: about `job`, by `principal`, since `since` (RFC 3339, or
        a duration back from now such as `1h`); a page of `limit` and the cursor of the next (None: no more)."""
        viewer = as_principal(who)
        if not 1 <= limit <= MAX_PAGE:
            raise BadRequest(f"The limit must be between 1 and {MAX_PAGE}.", extra={"errors": {"limit": [
                f"must be between 1 and {MAX_PAGE}"]}})
        before = _decode_cursor(cursor) if cursor else None
        if job is not None and not valid_id(job):
            return [], None  # names no job: nothing is about it
        sees_all = viewer.admin or viewer.operator
        now = self.entries.now_ms()
        floor = now - self.retention_ms
        if since is not None:
            floor = max(floor, _since_ms(since, now))
        key = self.entries.stream(job_id=job, owner=None if sees_all else viewer.name)
        out: list[AuditEntry] = []
        scanned = 0
        while scanned < SCAN_BUDGET:
            batch = self.entries.read(key, before=before, since_ms=floor, count=_BATCH)
            scanned += len(batch)
            for entry in batch:
                before = entry.id
                if (principal is None or entry.principal == principal) and (sees_all or entry.owner == viewer.name):
                    out.append(entry)
                    if len(out) == limit:
                        return out, _encode_cursor(entry.id)
            if len(batch) < _BATCH:
                return out, None
        return out, _encode_cursor(before) if before else None

    def about_job(self, job_id: str, *, actions: tuple[str, ...] = ("job.cancel", "job.answer"),
                  limit: int = 50) -> list[AuditEntry]:
        """The newest `limit` entries about a job (its owner already checked by the caller), oldest first."""
        floor = self.entries.now_ms() - self.retention_ms
        found = self.entries.read(self.entries.stream(job_id=job_id), before=None, since_ms=floor, count=limit)
        return [e for e in reversed(found) if e.action in actions]


def wire(entry: AuditEntry) -> dict[str, Any]:
    """An entry as the API shows it (empty parts left out)."""
    out: dict[str, Any] = {"id": entry.id, "at": rfc3339(entry.at_ms), "principal": entry.principal,
                           "action": entry.action}
    for name, value in (("jobId", entry.job_id), ("target", entry.target), ("owner", entry.owner),
                        ("detail", entry.detail), ("address", entry.address), ("requestId", entry.request_id)):
        if value:
            out[name] = value
    return out


def _since_ms(since: str, now_ms: int) -> int:
    problem = BadRequest("`since` must be an RFC 3339 time or a duration such as 90s, 15m, 1h or 7d.",
                         extra={"errors": {"since": ["must be an RFC 3339 time or a duration"]}})
    try:
        if since[:1].isdigit() and since[-1:].isalpha() and "-" not in since:
            return now_ms - int(parse_duration(since) * 1000)
        moment = dt.datetime.fromisoformat(since)
    except (ValueError, OverflowError) as exc:
        raise problem from exc
    if moment.tzinfo is None:
        raise problem
    return int(moment.timestamp() * 1000)


def _encode_cursor(entry_id: str) -> str:
    return base64.urlsafe_b64encode(f"a:{entry_id}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> str:
    try:
        tag, _, entry_id = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode().partition(":")
        ms, sep, seq = entry_id.partition("-")
        if tag != "a" or not sep or not (ms.isascii() and ms.isdigit() and seq.isascii() and seq.isdigit()) \
                or len(ms) > 15 or len(seq) > 19:
            raise ValueError(cursor)
        return entry_id
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise BadRequest("The cursor is not valid.") from exc
