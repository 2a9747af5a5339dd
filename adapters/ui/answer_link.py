"""The page behind a one-time answer link (`/ui/answer/<token>`): the one question it answers, as a form, for
whoever opens it, without a token or a session; and the answers of people a question is addressed to from the
"Waiting for me" view. Routes on the page's blueprint, through the same service.

A link is taken when its answer is posted (a second post is refused: 410 Gone, as a revoked or expired link is);
an answer the form check refuses gives the link back, so the person can correct it.
"""

from __future__ import annotations

from typing import Any

from flask import render_template, request

from tasks_backend.access.auth import Principal
from tasks_backend.errors import InvalidParams, NotWaitingForInput
from tasks_backend.model.domain import JobRecord, JobState

from . import forms as ui_forms
from .pages import _service, bp

GONE = {"used": "This link has already been used: the question was answered.",
        "expired": "This link has expired.",
        "gone": "This link no longer works: it was revoked, or never existed."}


def _gone(outcome: str) -> tuple[str, int]:
    return render_template("ui/error.html", title="Link not usable", detail=GONE.get(outcome, GONE["gone"]),
                           status=410, public=True), 410


def _question(record: JobRecord | None, key: str) -> dict[str, Any] | None:
    """The one question as the form macro takes a job (nothing else of the job: no id, operation or owner)."""
    if record is None or record.state is not JobState.INPUT_REQUIRED or key not in (record.input_requests or {}):
        return None
    return {"id": "link", "operation": "question",
            "questions": ui_forms.questions_of({key: (record.input_requests or {})[key]})}


def _page(token: str, question: dict[str, Any], answering: dict[str, Any] | None = None,
          status: int = 200) -> tuple[str, int]:
    return render_template("ui/answer_link.html", job=question, token=token, answering=answering), status


@bp.get("/answer/<token>")
def link_question(token: str) -> tuple[str, int]:
    service = _service()
    link = service.store.peek_link(token)
    question = _question(service.store.get(link.job_id), link.key) if link.outcome == "ok" else None
    if question is None:
        return _gone(link.outcome if link.outcome != "ok" else "used")
    return _page(token, question)


@bp.post("/answer/<token>")
def link_answer(token: str) -> tuple[str, int]:
    service = _service()
    link = service.store.use_link(token)
    if link.outcome != "ok":
        return _gone(link.outcome)
    question = _question(service.store.get(link.job_id), link.key)
    if question is None:
        return _gone("used")
    responses = ui_forms.answers_from_form(question["questions"], request.form)
    try:
        service.provide_input(Principal(f"link:{link.link_id}"), link.job_id, responses, only={link.key})
    except InvalidParams as exc:
        service.store.release_link(token)
        by_field, general = ui_forms.errors_by_field(question["questions"], exc.extra.get("errors"))
        answering = {"id": "link", "errors": by_field, "general": general or [exc.detail],
                     "values": request.form.to_dict()}
        return _page(token, question, answering, 422)
    except NotWaitingForInput:
        return _gone("used")
    return render_template("ui/error.html", title="Thank you", detail="Your answer was recorded.", status=200,
                           public=True), 200
