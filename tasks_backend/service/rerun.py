"""Reruns, and who may act on a job: its owner, or an operator (`TASKS_BACKEND_OPERATORS`) on anyone's.

A rerun is a new job with the original's operation, params, priority, retention and owner (the original owner,
also when an operator asks), and `rerunOf` naming the original. With `keep_steps` the steps the original
recorded are copied to it before it exists, so they count as done. An idempotency key makes a retried rerun
answer the same new job (the submit's machinery, keyed under the original owner).
Each rerun that makes a new job is recorded in the audit trail (`service.audit`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..access.auth import Principal
from ..errors import JobNotFinished, JobNotFound
from ..model.domain import JobRecord, JobState, SubmitOutcome
from ..model.questions import DEADLINE_STEP
from ..model.timing import Timing
from ..store.jobs import RedisStore
from .audit import Audit
from .cursors import valid_id
from .reads import as_principal

log = logging.getLogger(__name__)

#: The states a job can be rerun from.
RERUNNABLE = frozenset({JobState.FAILED, JobState.CANCELLED})


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
        steps = self.store.recorded_steps(job_id) if keep_steps else {}
        # A question's deadline is the original's: the rerun asks afresh, with a deadline of its own.
        steps = {name: value for name, value in steps.items() if not name.startswith(DEADLINE_STEP)}
        record, outcome = self._submit(
            original.owner, original.operation, json.loads(original.params_json), idempotency_key,
            original.ttl_ms / 1000, Timing(priority=original.priority), None,
            RerunOf(original.id, keep_steps, steps))
        if outcome is SubmitOutcome.CREATED:
            self.audit.record(principal, "job.rerun", job_id=original.id, target=record.id, owner=original.owner,
                              detail="keepSteps" if keep_steps else None)
        return record, outcome
