"""Listing by a `JobFilter`: the caller's jobs, or (operators and admins) one owner's or every owner's.

The index read is the narrowest the filter allows: a parent's children, a schedule's jobs, one owner's index, or
every owner's (a SCAN, then their pages merged newest first); every other field is checked on each record. Paging
is by the same cursor as `JobReads.list` (index score, id).
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator

from ..access.auth import Principal
from ..errors import BadRequest
from ..model.domain import JobRecord
from .cursors import decode_cursor, page_of
from .filters import ALL_OWNERS, JobFilter
from .reads import MAX_PAGE, JobReads, as_principal

#: Index entries read per round when collecting ids (a listing reads about a page's worth).
PAGE = 200


class FilteredReads(JobReads):
    def find(self, who: Principal | str, flt: JobFilter, *, limit: int = 50,
             cursor: str | None = None) -> tuple[list[JobRecord], str | None]:
        """A page of the jobs `flt` matches that the caller may see, newest first; the next cursor or None."""
        principal = as_principal(who)
        if not 1 <= limit <= MAX_PAGE:
            raise BadRequest(f"The limit must be between 1 and {MAX_PAGE}.")
        position = decode_cursor(cursor) if cursor else None
        # One more than a page (at least 50), so that a full page usually also tells whether another follows.
        with contextlib.closing(self._matches(principal, flt, position, max(limit + 1, 50))) as found:
            return page_of(found, limit)

    def matching_ids(self, who: Principal | str, flt: JobFilter, cap: int) -> list[str]:
        """The ids of up to `cap` jobs `flt` matches that the caller may see, newest first."""
        out: list[str] = []
        with contextlib.closing(self._matches(as_principal(who), flt, None, PAGE)) as found:
            for _, record in found:
                out.append(record.id)
                if len(out) >= cap:
                    break
        return out

    def _matches(self, principal: Principal, flt: JobFilter, position: tuple[float, str] | None,
                 size: int) -> Generator[tuple[float, JobRecord], None, None]:
        if flt.parent is not None:
            self.get(principal, flt.parent)  # another owner's parent reads as missing
        owner = flt.owner if flt.owner is not None else principal.name
        every = owner == ALL_OWNERS
        if flt.parent is not None:
            keys = [self.store.children_index(flt.parent)]
        elif flt.schedule is not None and not every:
            keys = [self.store.schedule_index(owner, flt.schedule)]
        elif every:
            keys = self.store.owner_indexes()
        else:
            keys = [self.store.owner_index_key(owner)]
        # Only one owner's own index may be pruned of its expired entries (as `JobReads.list` does).
        prune = owner if not every and flt.parent is None and flt.schedule is None else None
        read = 0
        try:
            while True:
                rows: set[tuple[str, float]] = set()
                for key in keys:
                    rows.update(self.store.index_page(key, position, size))
                if not rows:
                    return
                page = sorted(rows, key=lambda r: (r[1], r[0]), reverse=True)[:size]
                read += len(page)
                records = self.store.get_many([job_id for job_id, _ in page])
                if prune is not None:
                    self.store.forget_for_owner(prune, [i for (i, _), r in zip(page, records, strict=True)
                                                        if r is None])
                for (_, score), record in zip(page, records, strict=True):
                    if record is None or not flt.keeps(record):
                        continue
                    if not every and flt.parent is None and record.owner != owner:
                        continue  # an index keyed by a digest of the owner's name: each record's owner is checked
                    if record.owner != principal.name and not (principal.operator or principal.admin):
                        continue
                    yield score, record
                position = (page[-1][1], page[-1][0])
        finally:
            self.limits.scanned(principal.name, read)
