"""Questions addressed to people other than a job's owner: who may answer, what they see (`JobView`), one-time links.

A question's `to` names principals and roles (`TASKS_BACKEND_ROLES`, "finance=bob,carol;legal=dave"); roles are
resolved when someone reads or answers, so a change of roles applies to open questions at once. The owner may
always answer; an operator or admin who is not addressed may not. To anyone else the job stays a plain 404.
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass
from typing import Any

from ..access.auth import Principal
from ..config import Settings
from ..errors import JobNotFound, NotWaitingForInput
from ..model.domain import JobRecord, JobState, rfc3339
from ..model.questions import PRINCIPAL, ROLE, addressees, routing
from ..store.jobs import RedisStore
from .cursors import valid_id

#: How long a link to a question without a deadline works (ms).
DEFAULT_LINK_MS = 7 * 86400 * 1000


def parse_roles(spec: str) -> dict[str, frozenset[str]]:
    """`"finance=bob,carol;legal=dave"` -> {"finance": {"bob", "carol"}, "legal": {"dave"}}."""
    out: dict[str, frozenset[str]] = {}
    for part in spec.split(";"):
        if not part.strip():
            continue
        name, sep, members = part.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"TASKS_BACKEND_ROLES: {part.strip()!r} is not ROLE=principal,principal")
        out[name.strip()] = frozenset(m.strip() for m in members.split(",") if m.strip())
    return out


def reads_whole(principal: Principal, record: JobRecord) -> bool:
    """Whether the principal reads the whole job: its owner, an admin or an operator."""
    return record.owner == principal.name or principal.admin or principal.operator


@dataclass(frozen=True)
class JobView:
    """A job as one caller sees it. `asked` None: the whole job. Otherwise the caller is one its questions were
    addressed to, and `record` carries no params, result or error, and of its questions only those in `asked`
    (open, addressed to the caller: the ones it may answer)."""

    record: JobRecord
    asked: frozenset[str] | None = None

    @property
    def limited(self) -> bool:
        return self.asked is not None


def limited(record: JobRecord, keys: set[str]) -> JobView:
    """The addressee's view: what the record's handle shows, its operation and owner, and the questions in `keys`."""
    requests = record.input_requests or {}
    shown = {key: request for key, request in requests.items() if key in keys}
    return JobView(dataclasses.replace(
        record, params_json="{}", result=None, error=None, idempotency_key=None, trace=None, schedule=None,
        input_requests=shown if record.state is JobState.INPUT_REQUIRED else None), frozenset(shown))


@dataclass(frozen=True)
class Link:
    url: str
    expires_ms: int
    link_id: str


class Questions:
    def __init__(self, store: RedisStore, settings: Settings) -> None:
        self.store, self.settings = store, settings
        self.roles = parse_roles(settings.roles)

    def addressees_of(self, principal: Principal) -> list[str]:
        """The names a question may address the principal by: itself, and each of its roles."""
        return [PRINCIPAL + principal.name,
                *(ROLE + role for role, members in sorted(self.roles.items()) if principal.name in members)]

    def addressed_keys(self, principal: Principal, record: JobRecord) -> set[str]:
        """The job's open questions addressed to the principal (not counting ownership)."""
        if record.state is not JobState.INPUT_REQUIRED:
            return set()
        mine = set(self.addressees_of(principal))
        return {key for key, request in (record.input_requests or {}).items() if mine & set(addressees(request))}

    def answerable(self, principal: Principal, record: JobRecord) -> set[str] | None:
        """Which of the job's questions the principal may answer: None for all (the owner), else the keys
        addressed to it (empty: it was asked once, but nothing open is its). Anyone else: `JobNotFound`."""
        if record.owner == principal.name:
            return None
        keys = self.addressed_keys(principal, record)
        if keys or self.store.was_asked(record.id, self.addressees_of(principal)):
            return keys
        raise JobNotFound()

    def view_of(self, principal: Principal, record: JobRecord) -> JobView:
        """The job as the principal may see it: whole (owner, admin, operator), or limited to the questions
        addressed to it; anyone else: `JobNotFound`, as for a missing job."""
        if reads_whole(principal, record):
            return JobView(record)
        return limited(record, self.answerable(principal, record) or set())

    def seen_by(self, principal: Principal, record: JobRecord) -> JobView:
        """`view_of` for a job the principal was already let see (after its answer, as it changes)."""
        if reads_whole(principal, record):
            return JobView(record)
        return limited(record, self.addressed_keys(principal, record))

    def open_for(self, principal: Principal) -> list[dict[str, Any]]:
        """The open questions addressed to the principal (directly or by a role), newest job first."""
        names = self.addressees_of(principal)
        ids = self.store.asked_of(names)
        records = self.store.get_many(ids)
        gone = [job_id for job_id, r in zip(ids, records, strict=True) if r is None]
        if gone:
            for job_id in gone:
                self.store.forget_asked(job_id, names)
        out: list[dict[str, Any]] = []
        for record in records:
            if record is None:
                continue
            for key in sorted(self.addressed_keys(principal, record)):
                request = (record.input_requests or {})[key]
                params = request.get("params") or {}
                item: dict[str, Any] = {"jobId": record.id, "key": key, "operation": record.operation,
                                        "askedBy": record.owner, "message": params.get("message"),
                                        "requestedSchema": params.get("requestedSchema") or {},
                                        "to": addressees(request)}
                if routing(request).get("deadline"):
                    item["deadline"] = routing(request)["deadline"]
                out.append(item)
        return out

    # -- one-time links ---------------------------------------------------------------------------
    def _own_question(self, principal: Principal, job_id: str, key: str) -> JobRecord:
        record = self.store.get(job_id) if valid_id(job_id) else None
        if record is None or record.owner != principal.name:
            raise JobNotFound()
        if record.state is not JobState.INPUT_REQUIRED or key not in (record.input_requests or {}):
            raise NotWaitingForInput(f"The job has no open question `{key}`.")
        return record

    def make_link(self, principal: Principal, job_id: str, key: str, base_url: str) -> Link:
        """A link that answers the owner's open question `key` once, until its deadline (or a week)."""
        record = self._own_question(principal, job_id, key)
        deadline = routing((record.input_requests or {})[key]).get("deadlineMs")
        until = int(deadline) if isinstance(deadline, int) else self.store.now_ms() + DEFAULT_LINK_MS
        token, link_id = secrets.token_urlsafe(24), secrets.token_hex(6)
        self.store.put_link(job_id, key, token, link_id, until)
        return Link(f"{base_url.rstrip('/')}/ui/answer/{token}", until, link_id)

    def revoke_link(self, principal: Principal, job_id: str, key: str) -> bool:
        record = self.store.get(job_id) if valid_id(job_id) else None
        if record is None or record.owner != principal.name:
            raise JobNotFound()
        return self.store.revoke_link(job_id, key)


def link_answer(link: Link) -> dict[str, Any]:
    return {"url": link.url, "expiresAt": rfc3339(link.expires_ms), "linkId": link.link_id}
