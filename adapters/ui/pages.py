"""The web page for people, under `/ui`: sign in with a token, watch your jobs, answer their questions.

Server-rendered (Jinja), a little plain JavaScript for live progress, no build step. The same service,
principals and error mapping as every other protocol: the page signs a person in with a bearer token
checked by the app's authenticator, then keeps the principal and a mark of that credential in a signed
session cookie (HttpOnly, SameSite=Strict, never the token; see `sessions`): the session ends with the
credential, and its rights are read at each request. Every POST carries the session's CSRF token.
"""

from __future__ import annotations

import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Any

from flask import Blueprint, Flask, Response, current_app, g, redirect, render_template, request, url_for
from itsdangerous import BadSignature, URLSafeTimedSerializer
from werkzeug.exceptions import Forbidden, HTTPException
from werkzeug.http import parse_cookie

from tasks_backend.access.auth import Principal
from tasks_backend.errors import InvalidParams, Unauthenticated
from tasks_backend.model.domain import JobRecord, JobState, rfc3339
from tasks_backend.model.states import STATES_FOR_STATUS, WIRE_STATUS
from tasks_backend.service.jobs import JobService
from tasks_backend.service.runtime import Runtime

from ..entrance import CLIENT_ADDRESS, PRINCIPAL
from ..http.jobs import event_stream
from ..problems import error_parts
from ..protocol import Adapter
from . import forms as ui_forms
from .sessions import PRINCIPAL as PRINCIPAL_FIELD
from .sessions import SessionCredentials

PREFIX = "/ui"
COOKIE = "tb_ui_session"
#: A session ends after this long, at sign out, or when the server restarts (unless the secret is set).
SESSION_MAX_AGE_S = 12 * 3600
PAGE_SIZE = 20
#: Longest result shown on the page; the API serves all of it.
RESULT_SHOWN_CHARS = 20_000
NOTICES = {"answered": "Your answer was sent.", "declined": "You declined to answer."}
_PUBLIC_ENDPOINTS = frozenset({"ui.signin", "ui.static"})

bp = Blueprint("ui", __name__, url_prefix=PREFIX, template_folder="templates", static_folder="static/ui",
               static_url_path="/static")


def owns(path: str) -> bool:
    """Whether a request path is the page's (authenticated by its session, not a bearer header)."""
    return path == PREFIX or path.startswith(PREFIX + "/")


def signed_in(app: Flask, environ: dict[str, Any]) -> Principal | None:
    """Who a request's session cookie names while the session lasts (None: nobody): the entrance holds them to
    the limits a bearer token meets, and the page acts as them."""
    with app.app_context():
        session = _load(parse_cookie(environ).get(COOKIE, ""))
        # None once what opened the session is gone; rights as the settings give them now, never the cookie's.
        return None if session is None else _ui().credentials.principal(session)


ADAPTER = Adapter("ui", bp, session_paths=owns, session_principal=signed_in)


@dataclass
class _Ui:
    credentials: SessionCredentials
    sessions: URLSafeTimedSerializer


@bp.record_once
def _setup(state: Any) -> None:
    app: Flask = state.app
    runtime: Runtime = app.extensions["tasks_backend"]
    # Without a configured secret each process makes its own: sessions end when the server restarts
    # (`tasks-backend web` hands one secret to all of its gunicorn workers).
    secret = runtime.settings.ui_secret or secrets.token_urlsafe(32)
    app.extensions["tasks_backend_ui"] = _Ui(SessionCredentials(runtime.authenticator(), secret),
                                             URLSafeTimedSerializer(secret, salt="tasks-backend.ui.session"))


def _ui() -> _Ui:
    ui: _Ui = current_app.extensions["tasks_backend_ui"]
    return ui


def _service() -> JobService:
    runtime: Runtime = current_app.extensions["tasks_backend"]
    return runtime.service


# -- session, CSRF, headers ------------------------------------------------------
def _load(cookie: str) -> dict[str, Any] | None:
    """The session a cookie holds, if this server signed it and it has not outlived SESSION_MAX_AGE_S."""
    try:
        session = _ui().sessions.loads(cookie, max_age=SESSION_MAX_AGE_S)
    except BadSignature:
        return None
    return session if isinstance(session, dict) and isinstance(session.get("c"), str) else None


@bp.before_request
def _session() -> Response | None:
    session = _load(request.cookies.get(COOKIE, ""))
    if session is None:
        session = {"c": secrets.token_urlsafe(24)}  # anonymous, but with a CSRF token for the sign-in form
        g.ui_session_changed = True
    g.ui_session = session
    if request.method == "POST" and not hmac.compare_digest(
            str(request.form.get("csrf", "")).encode(), session["c"].encode()):
        raise Forbidden("The form has expired or did not come from this page; reload it and try again.")
    # Who the session names, as the entrance found it (`signed_in`) and admitted under the limits.
    principal = request.environ.get(PRINCIPAL)
    if isinstance(session.get("p"), str) and principal is None:  # the session has ended
        g.ui_session, g.ui_session_changed = {"c": session["c"]}, True
    if request.endpoint in _PUBLIC_ENDPOINTS:
        return None
    if principal is None:
        if request.method == "GET" and request.endpoint != "ui.events":
            return redirect(url_for("ui.signin", next=request.full_path.rstrip("?")), 303)  # type: ignore[return-value]
        raise Unauthenticated()
    g.principal = principal
    return None


@bp.after_request
def _headers(response: Response) -> Response:
    if getattr(g, "ui_session_changed", False):
        if g.ui_session is None:
            response.delete_cookie(COOKIE, path=PREFIX)
        else:
            # Secure whenever people reach the page over https: by the public URL, or by the scheme the
            # request came in with (behind TASKS_BACKEND_TRUSTED_PROXIES, the one they forwarded).
            runtime: Runtime = current_app.extensions["tasks_backend"]
            secure = request.is_secure or runtime.settings.public_url.lower().startswith("https:")
            response.set_cookie(COOKIE, _ui().sessions.dumps(g.ui_session), max_age=SESSION_MAX_AGE_S,
                                path=PREFIX, httponly=True, samesite="Strict", secure=secure)
    response.headers.setdefault("Cache-Control", "no-store")
    response.headers["Content-Security-Policy"] = (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    return response


@bp.app_context_processor
def _context() -> dict[str, Any]:
    session = getattr(g, "ui_session", None) or {}
    return {"csrf_token": session.get("c", ""), "signed_in_as": session.get("p")}


@bp.errorhandler(Exception)
def _error(exc: Exception) -> Response | tuple[str, int, list[tuple[str, str]]]:
    """Errors mapped as everywhere else (status and words), shown as a page."""
    headers: list[tuple[str, str]] = []
    if isinstance(exc, HTTPException):
        status, title, detail = exc.code or 500, exc.name, exc.description or ""
    else:
        status, body, headers = error_parts(exc)
        title, detail = body["title"], body["detail"]
    return render_template("ui/error.html", title=title, detail=detail, status=status), status, headers


# -- signing in and out ------------------------------------------------------------
def _safe_next(target: str | None) -> str:
    if target and owns(target) and not target.startswith("//") and "\\" not in target:
        return target
    return url_for("ui.jobs")


@bp.route("/signin", methods=["GET", "POST"])
def signin() -> Response | tuple[str, int]:
    if request.method == "GET":
        return render_template("ui/signin.html", next=request.args.get("next", "")), 200
    token = request.form.get("token", "").strip()
    # The gate the entrance uses for bearer headers: a guessed token counts against this address as anywhere else.
    gate = current_app.extensions["tasks_backend_entrance"].gate
    try:
        gate.authenticate(f"Bearer {token}", request.environ[CLIENT_ADDRESS])
        opened = _ui().credentials.opened_with(token)  # None for a JWT the API would no longer take
    except Unauthenticated:
        opened = None
    if opened is None:
        return render_template("ui/signin.html", next=request.form.get("next", ""),
                               error="That token was not accepted."), 401
    # Owned by who signed in: they read their own sign-ins (where their token was used), as admins do.
    _service().audit.record(opened[PRINCIPAL_FIELD], "ui.sign_in", owner=opened[PRINCIPAL_FIELD])
    # A fresh CSRF token with the new session, so one seen before signing in is worth nothing after.
    g.ui_session = {**opened, "c": secrets.token_urlsafe(24)}
    g.ui_session_changed = True
    return redirect(_safe_next(request.form.get("next")), 303)  # type: ignore[return-value]


@bp.post("/signout")
def signout() -> Response:
    g.ui_session, g.ui_session_changed = None, True
    return redirect(url_for("ui.signin"), 303)  # type: ignore[return-value]


# -- pages -----------------------------------------------------------------------------
@bp.get("")
@bp.get("/")
def home() -> Response:
    return redirect(url_for("ui.jobs"), 303)  # type: ignore[return-value]


@bp.get("/jobs")
def jobs() -> str:
    status = request.args.get("status") or None
    cursor = request.args.get("cursor") or None
    records, next_cursor = _service().list(g.principal, status=status, limit=PAGE_SIZE, cursor=cursor)
    template = "ui/_rows.html" if request.headers.get("X-UI-Fragment") == "rows" else "ui/jobs.html"
    return render_template(template, jobs=[_view(r) for r in records], status=status or "",
                           statuses=sorted(STATES_FOR_STATUS), next_cursor=next_cursor, paged=bool(cursor))


@bp.get("/schedules")
def schedules() -> str:
    runtime: Runtime = current_app.extensions["tasks_backend"]
    return render_template("ui/schedules.html", schedules=[s.wire() for s in runtime.schedules().list(g.principal)])


@bp.get("/waiting")
def waiting() -> str:
    records, more = _service().list(g.principal, status="input_required", limit=PAGE_SIZE,
                                    cursor=request.args.get("cursor") or None)
    return render_template("ui/waiting.html", jobs=[_view(r) for r in records], next_cursor=more,
                           notice=NOTICES.get(request.args.get("notice", "")))


@bp.get("/jobs/<job_id>")
def job(job_id: str) -> str:
    record = _service().get(g.principal, job_id)
    return _job_page(record, notice=NOTICES.get(request.args.get("notice", "")))


@bp.get("/jobs/<job_id>/events")
def events(job_id: str) -> Response:
    return event_stream(g.principal, job_id)


@bp.post("/jobs/<job_id>/cancel")
def cancel(job_id: str) -> str:
    record = _service().cancel(g.principal, job_id)
    return _job_page(record, notice=f"Cancel requested: the job is now {_status_words(record)}.")


@bp.post("/jobs/<job_id>/input")
def answer(job_id: str) -> Response | tuple[str, int]:
    service = _service()
    record = service.get(g.principal, job_id)
    back = "job" if request.form.get("from") == "job" else "waiting"
    questions = ui_forms.questions_of(record.input_requests)
    responses = ui_forms.answers_from_form(questions, request.form)
    try:
        service.provide_input(g.principal, job_id, responses)
    except InvalidParams as exc:
        by_field, general = ui_forms.errors_by_field(questions, exc.extra.get("errors"))
        answering = {"id": job_id, "errors": by_field, "general": general or [exc.detail],
                     "values": request.form.to_dict()}
        if back == "job":
            return _job_page(record, answering=answering), 422
        records, more = service.list(g.principal, status="input_required", limit=PAGE_SIZE)
        if all(r.id != record.id for r in records):
            records.insert(0, record)
        return render_template("ui/waiting.html", jobs=[_view(r) for r in records], next_cursor=more,
                               answering=answering), 422
    notice = "declined" if request.form.get("_action") == "decline" else "answered"
    if back == "job":
        return redirect(url_for("ui.job", job_id=job_id, notice=notice), 303)  # type: ignore[return-value]
    return redirect(url_for("ui.waiting", notice=notice), 303)  # type: ignore[return-value]


# -- what the templates get -----------------------------------------------------------
def _status_words(record: JobRecord) -> str:
    return WIRE_STATUS[record.state].replace("_", " ")


def _view(record: JobRecord) -> dict[str, Any]:
    return {
        "id": record.id, "operation": record.operation, "status": WIRE_STATUS[record.state],
        "status_words": "waiting for input" if record.state is JobState.INPUT_REQUIRED else _status_words(record),
        "message": record.status_message, "done": record.progress, "total": record.total,
        "created": rfc3339(record.created_ms), "updated": rfc3339(record.updated_ms),
        "terminal": record.terminal, "questions": ui_forms.questions_of(record.input_requests),
    }


def _job_page(record: JobRecord, *, notice: str | None = None, answering: dict[str, Any] | None = None) -> str:
    view = _view(record)
    view.update(expires=rfc3339(record.expires_ms), poll_ms=record.poll_ms, attempts=record.attempts,
                result=_shown(record.result) if record.state is JobState.COMPLETED else None,
                error=(record.error or {"message": "Job failed."}) if record.state is JobState.FAILED else None)
    timeline, last_event = _timeline(record)
    return render_template("ui/job.html", job=view, timeline=timeline, last_event=last_event, notice=notice,
                           answering=answering, actions=_actions(record))


def _actions(record: JobRecord) -> list[dict[str, str]]:
    """Who cancelled the job and who answered its questions, from the audit trail (oldest first)."""
    words = {"job.cancel": "Cancelled", "job.answer": "Answered"}
    return [{"at": rfc3339(e.at_ms), "what": words[e.action], "who": e.principal, "detail": e.detail}
            for e in _service().audit.about_job(record.id, actions=tuple(words))]


def _shown(value: Any) -> dict[str, Any]:
    text = json.dumps(value, indent=2, ensure_ascii=False)
    return {"text": text[:RESULT_SHOWN_CHARS], "more": max(0, len(text) - RESULT_SHOWN_CHARS)}


def _timeline(record: JobRecord) -> tuple[list[dict[str, Any]], str]:
    """What happened to the job, oldest first, from its event feed (its first 100 changes at most),
    and the id of the last one, from which the page's event stream goes on.

    Read from the store after the service has checked ownership; the feed is the one `watch` follows."""
    runtime: Runtime = current_app.extensions["tasks_backend"]
    events = runtime.store.events(record.id, "0-0", block_ms=1)  # 1 ms: a feed that is gone never blocks
    out: list[dict[str, Any]] = [{"at": rfc3339(record.created_ms), "status": "submitted", "message": None}]
    for e in events:
        out.append({"at": rfc3339(e.updated_ms), "status": WIRE_STATUS[e.state], "message": e.message,
                    "done": e.progress, "total": e.total})
    return out, events[-1].id if events else "0-0"
