"""Reruns, and who may act on a job: its owner, or an operator (`TASKS_BACKEND_OPERATORS`) on anyone's.

A rerun is a new job with the original's operation, params, priority, retention and owner (the original owner,
also when an operator asks), and `rerunOf` naming the original. With `keep_steps` the steps the original
recorded are copied to it before it exists, so they count as done, and the children its kept spawns name become
the rerun's (`kept_children`). An idempotency key makes a retried rerun answer the same new job (the submit's
machinery, keyed under the original owner).
Each rerun that makes a new job is recorded in the audit trail (`service.audit`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..access.auth import Principal
from ..errors import JobNotFinished, JobNotFound, StoreUnavailable
from ..model.domain import JobRecord, JobState, SubmitOutcome
from ..model.questions import DEADLINE_STEP
from ..model.timing import Timing
from ..running.context import SPAWN_RECORD, WAIT_RECORD, ChildFailed
from ..running.waking import Waker
from ..store.jobs import RedisStore
from .audit import Audit
from .children import MAX_DEPTH
from .cursors import valid_id
from .reads import as_principal

log = logging.getLogger(__name__)

#: The states a job can be rerun from.
RERUNNABLE = frozenset({JobState.FAILED, JobState.CANCELLED})
#: The record names `JobContext.spawn` and `JobContext.wait_for` give their steps.
SPAWN_STEP, WAIT_STEP = re.compile(rf"{SPAWN_RECORD}:\d+"), re.compile(rf"{WAIT_RECORD}:\d+")
#: A child in one of these a rerun may make again: it ran to its end and did not complete.
REMADE = frozenset({JobState.FAILED, JobState.CANCELLED})


def _json(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return None


def _told(failed: dict[str, Any]) -> str | None:
    """What the `ChildFailed` a wait's failed outcome raises says (None: not an outcome `wait_for` records)."""
    try:
        return str(ChildFailed(**failed))
    except TypeError:
        return None


def spawns(steps: Mapping[str, str]) -> dict[str, str]:
    """The steps that look like a spawn's record: name -> the child id it holds (a user's own step may be named
    like one; the caller keeps only those whose child is the job's)."""
    return {name: child for name, value in steps.items()
            if SPAWN_STEP.fullmatch(name) and isinstance(child := _json(value), str)}


def kept_children(original: JobRecord, steps: dict[str, str], children: Mapping[str, JobRecord],
                  last_step: str | None) -> tuple[dict[str, str], list[str]]:
    """What a rerun keeping steps copies of `steps`, and the children it keeps (ids, in spawn order). `children`:
    the original's children by the name of the spawn step that made each; `last_step`: the step it recorded last.

    A copy as it is would replay a failed wait: a job that failed on a child would fail again at once. So when the
    original failed with an uncaught `ChildFailed` from its one failed wait, and that wait was the last step it
    recorded (nothing it did after, on a path a rerun may not take, is replayed), that wait's record is dropped,
    and so is the spawn of every child that ended failed or cancelled: the rerun makes those children again and
    waits for them beside the kept ones, which become its own and live as long as it. Likewise a cancelled original
    that recorded no failed wait: its children still going were cancelled with it, and the rerun makes them again.
    Any other record is kept; a failure that cannot be told apart this way (user code that caught one `ChildFailed`
    and went on, a child gone missing) leaves the steps as they were, so the rerun does what the original did."""
    failed_waits = [(name, outcome["failed"]) for name, value in steps.items()
                    if WAIT_STEP.fullmatch(name) and isinstance(outcome := _json(value), dict)
                    and isinstance(outcome.get("failed"), dict)]
    drop: set[str] = set()
    error = original.error or {}
    if original.state is JobState.FAILED and error.get("type") == ChildFailed.__name__ and len(failed_waits) == 1 \
            and failed_waits[0][0] == last_step:
        wait, failed = failed_waits[0]
        culprit = next((c for c in children.values() if c.id == failed.get("child_id")), None)
        if culprit is not None and culprit.state in REMADE and _told(failed) == error.get("message"):
            drop = {wait, *(name for name, c in children.items() if c.state in REMADE)}
    elif original.state is JobState.CANCELLED and not failed_waits:
        # Its children still going were cancelled with it (the cascade), and no wait of it saw one end so.
        drop = {name for name, c in children.items() if c.state in REMADE}
    kept = {name: value for name, value in steps.items() if name not in drop}
    return kept, in_spawn_order(children, lambda name: name not in drop)


def in_spawn_order(children: Mapping[str, JobRecord], wanted: Callable[[str], bool]) -> list[str]:
    """The ids of the `wanted` children (by the name of the spawn step that made each), in the order spawned."""
    return [children[name].id for name in sorted(filter(wanted, children), key=lambda n: int(n.split(":")[1]))]


@dataclass(frozen=True)
class RerunOf:
    """What makes a submit a rerun: the original's id, and the steps copied from it."""

    of: str
    keep_steps: bool = False
    steps: Mapping[str, str] = field(default_factory=dict)


class Reruns:
    store: RedisStore
    #: JobService's submit (see `JobService._submit`).
    _submit: Callable[..., tuple[JobRecord, SubmitOutcome]]
    #: ChildJobs': a child in its parent's index, cancelled if the parent was meanwhile.
    _indexed_child: Callable[[str, JobRecord], JobRecord]
    #: ChildJobs': what follows a cancel (the cancelled job's unfinished children cancelled with it...).
    _after_cancel: Callable[[JobRecord], None]
    #: ChildJobs': who wakes a parent whose children are all finished.
    _waker: Callable[[], Waker]
    audit: Audit

    def acting_owner(self, principal: Principal, job_id: str) -> str:
        """The owner whose job `principal` acts on: its own name, or for an operator the job's owner."""
        if principal.operator:
            owners = self.store.owners_of([job_id])
            if owners and owners[0] is not None:
                return owners[0]
        return principal.name

    def actionable(self, who: Principal | str, job_id: str) -> tuple[Principal, JobRecord]:
        """The job, if the caller may act on it (its owner, or an operator); anything else reads as missing."""
        principal = as_principal(who)
        record = self.store.get(job_id) if valid_id(job_id) else None
        if record is None or (record.owner != principal.name and not principal.operator):
            raise JobNotFound()
        return principal, record

    def rerun(self, who: Principal | str, job_id: str, *, keep_steps: bool = False,
              idempotency_key: str | None = None) -> tuple[JobRecord, SubmitOutcome]:
        """Rerun a failed or cancelled job as a new one (see the module's docstring); `JobNotFinished` otherwise."""
        principal, original = self.actionable(who, job_id)
        if original.state not in RERUNNABLE:
            raise JobNotFinished(f"The job is {original.state.value}; only a failed or cancelled job can be rerun.")
        if keep_steps and original.state is JobState.CANCELLED:
            # Its cancel's request may still be on its way to the children (or have died on it): their cancel is
            # finished first, so none still going is kept, only for that cascade to cancel it under the rerun.
            self._after_cancel(original)
        steps = self.store.recorded_steps(job_id) if keep_steps else {}
        # A question's deadline is the original's: the rerun asks afresh, with a deadline of its own.
        steps = {name: value for name, value in steps.items() if not name.startswith(DEADLINE_STEP)}
        children = self._children(original, steps)
        steps, kept = kept_children(original, steps, children, self.store.last_step(job_id) if children else None)
        # Kept alive first as long as the rerun will be (a minute more: it is made after this reading of the
        # clock): a rerun whose request dies before it takes them over still finds those that finished when it
        # waits (one still going stays the original's, and is cancelled once that expires, until the request is
        # made again).
        self._keep_alive(kept, children, self.store.now_ms() + original.ttl_ms + 60_000)
        record, outcome = self._submit(
            original.owner, original.operation, json.loads(original.params_json), idempotency_key,
            original.ttl_ms / 1000, Timing(priority=original.priority), None,
            RerunOf(original.id, keep_steps, steps))
        if children:
            self._take_over(original, record, children, kept if outcome is SubmitOutcome.CREATED else None)
        if outcome is SubmitOutcome.CREATED:
            self.audit.record(principal, "job.rerun", job_id=original.id, target=record.id, owner=original.owner,
                              detail="keepSteps" if keep_steps else None)
        return record, outcome

    def _take_over(self, original: JobRecord, rerun: JobRecord, children: Mapping[str, JobRecord],
                   kept: list[str] | None) -> None:
        """The `kept` children become the rerun's, in its index (a cancel of it reaches them, as one made meanwhile
        already did), not one another rerun took over first; also for a retried request (`kept` None), whose first
        may have ended before this. That one's rerun replays the spawns its first request copied, which this
        reading of the children may no longer keep (one ended since): those are the ones to take over."""
        if kept is None:
            copied = set(spawns(self.store.recorded_steps(rerun.id)).values())
            kept = in_spawn_order(children, lambda name: children[name].id in copied)
            self._keep_alive(kept, children, rerun.expires_ms)
        by_id = {c.id: c for c in children.values()}
        taken = [child_id for child_id in kept
                 if self.store.adopt(child_id, rerun.expires_ms, taken_from=original.id, taker=rerun.id)]
        for child_id in taken:  # lengthened to the rerun's end by the takeover
            child = by_id[child_id]
            self._indexed_child(rerun.id, replace(child, ttl_ms=rerun.expires_ms - child.created_ms))
        if taken:
            # The rerun runs already, and may wait for a child that ended before it was the rerun's: that end told
            # the original. Should this check fail, the wake schedule looks within seconds.
            with contextlib.suppress(StoreUnavailable):
                self._waker().check_parent(rerun.id)

    def _keep_alive(self, kept: list[str], children: Mapping[str, JobRecord], until_ms: int) -> None:
        """The kept children alive until `until_ms`, and the descendants of those still going (their own waits
        read them)."""
        going = {c.id for c in children.values() if not c.terminal}
        todo = [(child_id, 0) for child_id in kept]
        while todo:
            job_id, depth = todo.pop()
            self.store.adopt(job_id, until_ms)
            if (depth > 0 or job_id in going) and depth < MAX_DEPTH:
                todo += [(grandchild, depth + 1) for grandchild in self.store.child_ids(job_id)]

    def _children(self, original: JobRecord, steps: Mapping[str, str]) -> dict[str, JobRecord]:
        """The original's children its spawn steps name, by step name: those in its index of children (made by its
        spawns, or kept from the job it reran in turn)."""
        named = spawns(steps)
        if not named:
            return {}
        indexed = set(self.store.child_ids(original.id))
        records = self.store.get_many(list(named.values()))
        return {name: child for name, child in zip(named, records, strict=True)
                if child is not None and child.id in indexed and child.owner == original.owner}
