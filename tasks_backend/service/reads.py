"""The reading half of `JobService`: one job, a page of the caller's jobs (by status, or a parent's children),
counts and recent jobs. Every read that names a job checks that the caller owns it; `read` also lets in those its
questions were addressed to, with the limited view `service.questions` gives them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Sequence

from ..access.auth import Principal
from ..access.policy import Limits
from ..errors import BadRequest, JobNotFound
from ..model.domain import JobRecord
from ..model.states import STATES_FOR_STATUS
from ..store.jobs import RedisStore
from .cursors import decode_cursor, decode_recent, encode_recent, page_of, recency, valid_id
from .questions import JobView, Questions, reads_whole

MAX_PAGE = 200

#: A protocol's own filter over a batch of the caller's jobs: returns those it keeps, in order.
Selector = Callable[[list[JobRecord]], list[JobRecord]]


def as_principal(who: Principal | str) -> Principal:
    """The in-process API takes a plain owner name where the adapters pass an authenticated principal."""
    return who if isinstance(who, Principal) else Principal(who)


class JobReads:
    store: RedisStore
    limits: Limits
    questions: Questions

    def read(self, who: Principal | str, job_id: str) -> JobView:
        """The job as the caller may see it: whole (`get`), or as one of its questions' addressees sees it (a
        `JobView.limited` view); anyone else gets the `JobNotFound` a missing job raises. For every protocol's
        read of one job."""
        if not valid_id(job_id):
            raise JobNotFound()
        return self._view(as_principal(who), self.store.read(job_id))

    def read_with_meta(self, who: Principal | str, job_id: str, field: str) -> tuple[JobView, str | None]:
        """`read`, and one field of the job's adapter metadata (`job_meta`), read in the same round trip."""
        if not valid_id(job_id):
            raise JobNotFound()
        record, value = self.store.read_with_meta(job_id, field)
        return self._view(as_principal(who), record), value

    def _view(self, principal: Principal, record: JobRecord | None) -> JobView:
        if record is None:
            raise JobNotFound()
        return self.questions.view_of(principal, record)

    def get(self, who: Principal | str, job_id: str) -> JobRecord:
        principal = as_principal(who)
        if not valid_id(job_id):
            raise JobNotFound()
        return _visible(principal, self.store.read(job_id))

    def get_with_meta(self, who: Principal | str, job_id: str, field: str) -> tuple[JobRecord, str | None]:
        """`get`, and one field of the job's adapter metadata (`job_meta`), read in the same round trip."""
        principal = as_principal(who)
        if not valid_id(job_id):
            raise JobNotFound()
        record, value = self.store.read_with_meta(job_id, field)
        return _visible(principal, record), value

    def list(self, who: Principal | str, *, status: str | None = None, limit: int = 50,
             cursor: str | None = None, where: Selector | None = None,
             parent: str | None = None) -> tuple[list[JobRecord], str | None]:
        """The caller's own jobs, newest first; `next_cursor` is None on the last page.

        `where` narrows further (a protocol's own filters); `parent` lists that job's children instead (the
        parent must be the caller's: another's answers `JobNotFound`). A cursor is handed out only when
        another job matches after the page, so that the last page never points at an empty one.
        """
        principal = as_principal(who)
        if parent is not None:
            self.get(principal, parent)
        if status is not None and status not in STATES_FOR_STATUS:
            raise BadRequest(f"Unknown status; use one of {sorted(STATES_FOR_STATUS)}.")
        if not 1 <= limit <= MAX_PAGE:
            raise BadRequest(f"The limit must be between 1 and {MAX_PAGE}.")
        wanted = STATES_FOR_STATUS[status] if status else None
        position = decode_cursor(cursor) if cursor else None
        # One more than a page, so that a full page usually also tells whether another follows.
        with contextlib.closing(self._pages(principal.name, position, max(limit + 1, 50), parent)) as pages:
            found = ((score, record) for page in pages for score, record in self._live(principal.name, page, where)
                     if wanted is None or record.state in wanted)
            return page_of(found, limit)

    def count(self, who: Principal | str, *, where: Selector | None = None) -> int:
        """How many of the caller's jobs there are, or how many of them `where` keeps.

        Unfiltered: the size of the owner index, O(1) (it may still count jobs that expired since a
        listing last passed them). Filtered: one pass over the owner's jobs, O(n), about three round
        trips per 200 jobs, which only a filtered listing pays.
        """
        principal = as_principal(who)
        if where is None:
            return self.store.owner_count(principal.name)
        total = 0
        with contextlib.closing(self._pages(principal.name, None, 200)) as pages:
            for page in pages:
                total += len(self._live(principal.name, page, where))
        return total

    def list_recent(self, who: Principal | str, *, limit: int = 50, cursor: str | None = None,
                    where: Selector | None = None) -> tuple[Sequence[JobRecord], str | None, int]:
        """The caller's jobs that `where` keeps, most recently changed first: (page, next cursor, total).

        For protocols that order by last change rather than by creation (A2A's ListTasks). The owner
        index is ordered by creation, so this reads all of the owner's jobs, O(n) like a filtered
        `count`, and the total comes from the same pass. Ties are broken by creation (newer first),
        then id, so that a page never swaps two jobs with its neighbour. A job that changes between
        two pages moves ahead of the cursor: it is not listed twice.
        """
        principal = as_principal(who)
        if not 1 <= limit <= MAX_PAGE:
            raise BadRequest(f"The limit must be between 1 and {MAX_PAGE}.")
        after = decode_recent(cursor) if cursor else None
        kept: list[JobRecord] = []
        with contextlib.closing(self._pages(principal.name, None, 200)) as pages:
            for page in pages:
                kept.extend(record for _, record in self._live(principal.name, page, where))
        kept.sort(key=recency)
        rest = [r for r in kept if after is None or recency(r) > after]
        out = rest[:limit]
        next_cursor = encode_recent(recency(out[-1])) if len(rest) > limit else None
        return out, next_cursor, len(kept)

    def _pages(self, owner: str, position: tuple[float, str] | None, size: int,
               parent: str | None = None) -> Generator[Sequence[tuple[str, float]], None, None]:
        """The owner index (or the `parent`'s children), page after page from `position`; once done, the limits
        are told how many jobs were read."""
        read = 0
        try:
            while page := (self.store.owner_page(owner, position, size) if parent is None
                           else self.store.children_page(parent, position, size)):
                read += len(page)
                yield page
                position = (page[-1][1], page[-1][0])
        finally:
            self.limits.scanned(owner, read)

    def _live(self, owner: str, page: Sequence[tuple[str, float]],
              where: Selector | None) -> Sequence[tuple[float, JobRecord]]:
        """(index score, record) behind a page of the owner index, in its order, that `where` keeps;
        entries of expired jobs are dropped from the index on the way.

        The index is keyed by a digest of the owner's name: each record's own owner is checked, and
        another's job is passed over (and left in the index, which may be that owner's too)."""
        records = self.store.get_many([job_id for job_id, _ in page])
        self.store.forget_for_owner(owner, [job_id for (job_id, _), r in zip(page, records, strict=True)
                                            if r is None])
        live = [r for r in records if r is not None and r.owner == owner]
        if where is not None and live:
            live = where(live)
        scores: dict[str, float] = dict(page)
        return [(scores[r.id], r) for r in live]


def _visible(principal: Principal, record: JobRecord | None) -> JobRecord:
    """The record if the principal may see it; anything else reads as missing."""
    if record is None or not reads_whole(principal, record):
        raise JobNotFound()
    return record
