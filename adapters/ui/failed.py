"""The page's "Failed" view: failed and cancelled jobs (an operator's: every owner's), rerun one, or tick several and
rerun them, or rerun every failed one as a bulk job. Routes on the page's blueprint, through the same service."""

from __future__ import annotations

from flask import g, render_template, request

from tasks_backend.errors import BadRequest, TasksBackendError
from tasks_backend.model.domain import JobState
from tasks_backend.service.filters import ALL_OWNERS, JobFilter

from .pages import PAGE_SIZE, _service, _view, bp

FAILED = frozenset({JobState.FAILED, JobState.CANCELLED})
#: The most jobs one press of "Rerun selected" reruns (a page's worth; more is a bulk job's).
MAX_SELECTED = 50


def _filter() -> JobFilter:
    return JobFilter(states=FAILED, owner=ALL_OWNERS if g.principal.operator else None)


def _page(notice: str | None = None, status: int = 200) -> tuple[str, int]:
    records, next_cursor = _service().find(g.principal, _filter(), limit=PAGE_SIZE,
                                           cursor=request.args.get("cursor") or None)
    jobs = [_view(r) | {"owner": r.owner} for r in records]
    return render_template("ui/failed.html", jobs=jobs, next_cursor=next_cursor, notice=notice,
                           everyone=g.principal.operator), status


@bp.get("/failed")
def failed() -> tuple[str, int]:
    return _page()


@bp.post("/failed")
def rerun_failed() -> tuple[str, int]:
    """`one`: rerun that job; `_action=selected`: rerun the ticked ones; `_action=all`: a bulk rerun of every failed
    job the caller may act on."""
    service = _service()
    if request.form.get("_action") == "all":
        flt = {"status": "failed", **({"owner": ALL_OWNERS} if g.principal.operator else {})}
        bulk, _ = service.start_bulk(g.principal, {"action": "rerun", "filter": flt})
        return _page(f"Bulk rerun started as job {bulk.id[:8]}; its page shows its progress.", 202)
    one = request.form.get("one")
    ids = [one] if one else request.form.getlist("ids")[:MAX_SELECTED]
    if not ids:
        raise BadRequest("Tick the jobs to rerun first.")
    made, refused = 0, 0
    for job_id in ids:
        try:
            service.rerun(g.principal, job_id)
            made += 1
        except TasksBackendError:
            refused += 1  # gone, or no longer failed or cancelled
    note = f"Rerun started for {made} job{'s' * (made != 1)}."
    return _page(note + (f" {refused} could not be rerun." if refused else ""), 202)
