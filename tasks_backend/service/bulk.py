"""Bulk actions: `start_bulk` checks the request and starts a `tasks_backend.bulk` job owned by the caller; the
job (on a worker, `running.builtin`) calls back `bulk_match` and `bulk_apply`, acting as its owner with the rights
the settings give that principal when it runs.

Rerun acts on failed and cancelled jobs, cancel on unfinished ones; the others a filter matches are skipped. A
bulk job matches at most `MAX_BULK` jobs (newest first), never itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..access.auth import Principal, principal_of
from ..config import Settings
from ..errors import BadRequest, JobNotCancelable, JobNotFinished, JobNotFound
from ..model.domain import TERMINAL_STATES, JobRecord, JobState, SubmitOutcome
from ..model.timing import Timing
from ..running.builtin import ACTIONS, BULK
from .audit import Audit
from .filters import JobFilter, parse_filter
from .reads import as_principal
from .rerun import RERUNNABLE

#: The most jobs one bulk action matches.
MAX_BULK = 10_000
#: The body fields of `POST /v1/jobs/bulk`.
BODY_FIELDS = ("action", "filter", "dryRun", "keepSteps")


def bulk_key(bulk_id: str, job_id: str) -> str:
    """The idempotency key of a bulk job's rerun of one job: a replay of its batch answers the same new job."""
    return f"bulk:{bulk_id}:{job_id}"


class Bulk:
    settings: Settings
    _submit: Callable[..., tuple[JobRecord, SubmitOutcome]]
    matching_ids: Callable[..., list[str]]
    cancel: Callable[..., JobRecord]
    rerun: Callable[..., tuple[JobRecord, SubmitOutcome]]
    audit: Audit

    def start_bulk(self, who: Principal | str, body: dict[str, Any], *,
                   idempotency_key: str | None = None) -> tuple[JobRecord, SubmitOutcome]:
        """Check a bulk request (an unknown field, action or filter field is a 400 naming it, and nothing is
        done) and start its job."""
        principal = as_principal(who)
        unknown = sorted(set(body) - set(BODY_FIELDS))
        if unknown:
            raise BadRequest(f"Unknown fields: {', '.join(unknown)}.", extra={"fields": unknown})
        action = body.get("action")
        if action not in ACTIONS:
            raise BadRequest(f"Unknown action {action!r}; use one of {', '.join(ACTIONS)}.",
                             extra={"field": "action"})
        raw_filter = body.get("filter", {})
        if not isinstance(raw_filter, dict):
            raise BadRequest("`filter` must be a JSON object.", extra={"field": "filter"})
        for flag in ("dryRun", "keepSteps"):
            if not isinstance(body.get(flag, False), bool):
                raise BadRequest(f"`{flag}` must be true or false.", extra={"field": flag})
        flt = parse_filter(raw_filter, principal)
        params = {"action": action, "filter": flt.wire(), "dryRun": body.get("dryRun", False),
                  "keepSteps": body.get("keepSteps", False)}
        record, outcome = self._submit(principal, BULK, params, idempotency_key, None, Timing(), None)
        if outcome is SubmitOutcome.CREATED:
            # Owned as the bulk job is: its owner reads the entry in their own trail, as for any other action.
            self.audit.record(principal, "jobs.bulk", target=record.id, owner=record.owner,
                              detail=f"{action}{' (dry run)' if params['dryRun'] else ''}")
        return record, outcome

    # -- called back by the bulk job on a worker ------------------------------------------------------
    def bulk_match(self, owner: str, bulk_id: str, action: str, filter_wire: dict[str, Any]) -> list[str]:
        principal = principal_of(self.settings, owner)
        flt: JobFilter = parse_filter(filter_wire, principal, internal=True)
        # Only the jobs the action applies to: what a dry run counts is what a real one would do.
        applicable = RERUNNABLE if action == "rerun" else frozenset(JobState) - TERMINAL_STATES
        flt = dataclasses.replace(flt, states=applicable if flt.states is None else flt.states & applicable)
        return [i for i in self.matching_ids(principal, flt, MAX_BULK + 1) if i != bulk_id][:MAX_BULK]

    def bulk_apply(self, owner: str, bulk_id: str, action: str, ids: list[str],
                   keep_steps: bool) -> dict[str, Any]:
        """Act on each job of a batch: {"ids": done, "newIds": reruns made, "skippedIds": not acted on}."""
        principal = principal_of(self.settings, owner)
        done: list[str] = []
        new_ids: list[str] = []
        skipped: list[str] = []
        for job_id in ids:
            try:
                if action == "cancel":
                    self.cancel(principal, job_id)
                else:
                    record, _ = self.rerun(principal, job_id, keep_steps=keep_steps,
                                           idempotency_key=bulk_key(bulk_id, job_id))
                    new_ids.append(record.id)
                done.append(job_id)
            except (JobNotFound, JobNotCancelable, JobNotFinished):
                skipped.append(job_id)  # gone, or no longer in a state the action applies to
        return {"ids": done, "newIds": new_ids, "skippedIds": skipped}

