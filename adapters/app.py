"""The Flask app factory: every adapter module over one runtime, behind one entrance; each maps errors to its codes."""

from __future__ import annotations

from collections.abc import Sequence
from http import HTTPStatus

from flask import Flask, Response, g, request

from tasks_backend.config import Settings
from tasks_backend.errors import Unauthenticated
from tasks_backend.service.runtime import Runtime, build_runtime

from . import problems, protocol
from .entrance import PRINCIPAL, PUBLIC_PATHS, Check, Entrance

__all__ = ["PUBLIC_PATHS", "create_app"]


def create_app(settings: Settings | None = None, runtime: Runtime | None = None,
               checks: Sequence[Check] = ()) -> Flask:
    """The app; `checks` run at the entrance on every request after authentication (see `Entrance`)."""
    runtime = runtime or build_runtime(settings)
    app = Flask("tasks_backend")
    app.config["MAX_CONTENT_LENGTH"] = runtime.settings.max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.json.compact = True  # type: ignore[attr-defined]  # as every other answer (`wire_json`), debug or not
    app.extensions["tasks_backend"] = runtime
    session_paths = protocol.session_paths()

    @app.before_request
    def _principal() -> None:
        # The entrance authenticated the caller; a request that did not come through it gets nothing.
        if session_paths(request.path):
            return  # the adapter's own session names the caller (the web page); the door checked the rest
        if PRINCIPAL not in request.environ:
            raise Unauthenticated()
        g.principal = request.environ[PRINCIPAL]

    @app.after_request
    def _reason_phrase(response: Response) -> Response:
        # Werkzeug writes reason phrases in capitals ("202 ACCEPTED"); the entrance answers with the standard
        # ones ("202 Accepted"): one spelling for every answer.
        if response.status_code in HTTPStatus._value2member_map_:
            response.status = f"{response.status_code} {HTTPStatus(response.status_code).phrase}"
        return response

    problems.register(app)
    # Every protocol module of this package that declares an `ADAPTER` (see adapters/protocol.py).
    for adapter in protocol.registered():
        if adapter.install is not None:
            adapter.install(app, runtime)
        app.register_blueprint(adapter.blueprint)
    entrance = Entrance(app.wsgi_app, runtime, runtime.authenticator(), checks,
                        session_paths=session_paths, sessions=protocol.sessions(app))
    app.wsgi_app = entrance  # type: ignore[method-assign]
    app.extensions["tasks_backend_entrance"] = entrance
    return app
