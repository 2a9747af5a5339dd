"""What a question (an input request) carries besides its form: whom it is addressed to and its deadline.

Both ride in the request's `params._meta` under `QUESTION_META`, so every protocol that shows input requests
shows them as they are: `{"to": ["principal:bob", "role:finance"], "deadline": RFC 3339, "deadlineMs": ms}`.
"""

from __future__ import annotations

from typing import Any

QUESTION_META = "io.tasks-backend/question"
PRINCIPAL, ROLE = "principal:", "role:"
#: The answer the deadline records for an unanswered question (the job then goes on or fails, as it asked).
TIMEOUT_ACTION = "timeout"
#: The prefix of the step that records a question's deadline the first time it is asked (`deadline:<key>`).
DEADLINE_STEP = "deadline:"


def check_addressees(to: list[str] | tuple[str, ...] | None) -> list[str]:
    """`to` as given, or ValueError naming the entry that is neither `principal:NAME` nor `role:NAME`."""
    out: list[str] = []
    for entry in to or ():
        if not isinstance(entry, str) or not any(
                entry.startswith(p) and len(entry) > len(p) for p in (PRINCIPAL, ROLE)):
            raise ValueError(f"`to` entries are 'principal:NAME' or 'role:NAME', not {entry!r}")
        out.append(entry)
    return out


def routing(request: dict[str, Any]) -> dict[str, Any]:
    """The request's routing (`to`, `deadline`, `deadlineMs`), empty when it has none."""
    params = request.get("params") if isinstance(request, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    value = meta.get(QUESTION_META) if isinstance(meta, dict) else None
    return value if isinstance(value, dict) else {}


def addressees(request: dict[str, Any]) -> list[str]:
    return [str(a) for a in routing(request).get("to") or []]


def deadline_ms(request: dict[str, Any]) -> int | None:
    value = routing(request).get("deadlineMs")
    return int(value) if isinstance(value, int | float) else None
