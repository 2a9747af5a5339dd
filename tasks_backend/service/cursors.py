"""Listing cursors: opaque base64url text that says where the next page of a caller's jobs starts.

Three kinds: by creation (the owner index's score and the job id, for `JobService.list`), by last change (for
`JobService.list_recent`), and a schedule's creation and name (for `ScheduleService.page`). Rule: a cursor is
decoded only here, and anything that does not decode is a `BadRequest`, never a 500; a value that would reach
Redis as a score (nan, inf) is refused as well.
"""

from __future__ import annotations

import base64
import binascii
import math
import uuid
from collections.abc import Iterable
from typing import Any

from ..errors import BadRequest
from ..model.domain import JobRecord
from ..model.schedules import NAME


def valid_id(job_id: Any) -> bool:
    """Whether `job_id` is a job id as a submit makes one (a UUID's canonical text); anything else names no job."""
    if not isinstance(job_id, str) or len(job_id) != 36:
        return False
    try:
        return str(uuid.UUID(job_id)) == job_id
    except ValueError:
        return False


def encode_cursor(order: float, job_id: str) -> str:
    return base64.urlsafe_b64encode(f"{order!r}:{job_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created, _, job_id = raw.partition(":")
        order = float(created)
        if not valid_id(job_id) or not math.isfinite(order):  # nan or inf would reach Redis as a score
            raise ValueError(job_id)
        return order, job_id
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise BadRequest("The cursor is not valid.") from exc


def encode_schedule_cursor(created: float, name: str) -> str:
    return base64.urlsafe_b64encode(f"s:{created!r}:{name}".encode()).decode().rstrip("=")


def decode_schedule_cursor(cursor: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        tag, created, name = raw.split(":", 2)
        order = float(created)
        if tag != "s" or not NAME.fullmatch(name) or not math.isfinite(order):
            raise ValueError(name)
        return order, name
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise BadRequest("The cursor is not valid.") from exc


def recency(record: JobRecord) -> tuple[int, int, str]:
    """Sort key: the latest change first, then the newest job, then by id."""
    return -record.updated_ms, -record.created_ms, record.id


def encode_recent(key: tuple[int, int, str]) -> str:
    return base64.urlsafe_b64encode(f"r:{-key[0]}:{-key[1]}:{key[2]}".encode()).decode().rstrip("=")


def decode_recent(cursor: str) -> tuple[int, int, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        tag, updated, created, job_id = raw.split(":")
        if tag != "r" or not valid_id(job_id):
            raise ValueError(job_id)
        return -int(updated), -int(created), job_id
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise BadRequest("The cursor is not valid.") from exc


def page_of(found: Iterable[tuple[float, JobRecord]], limit: int) -> tuple[list[JobRecord], str | None]:
    """The first `limit` of `found` (index score, record), newest first, and the cursor after them: handed out
    only when one more was found, so that the last page never points at an empty one."""
    out: list[JobRecord] = []
    last: tuple[float, str] | None = None
    for score, record in found:
        if len(out) == limit:
            assert last is not None
            return out, encode_cursor(*last)
        out.append(record)
        last = (score, record.id)
    return out, None
