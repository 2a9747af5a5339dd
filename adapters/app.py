"""The Flask app factory: every protocol adapter over one runtime, one authenticator, one error map."""

from __future__ import annotations

from flask import Flask, g, request

from tasks_backend.config import Settings
from tasks_backend.errors import PayloadTooLarge
from tasks_backend.runtime import Runtime, build_runtime

from . import a2a, http_jobs, mcp, observability, openapi, problems, ui
from .fast_path import FastPath

#: Paths anyone may read: probes and the API description.
PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json", "/.well-known/agent-card.json"})


def create_app(settings: Settings | None = None, runtime: Runtime | None = None) -> Flask:
    runtime = runtime or build_runtime(settings)
    app = Flask("tasks_backend")
    app.config["MAX_CONTENT_LENGTH"] = runtime.settings.max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["tasks_backend"] = runtime
    authenticator = runtime.authenticator()

    @app.before_request
    def _authenticate() -> None:
        if request.content_length and request.content_length > runtime.settings.max_body_bytes:
            raise PayloadTooLarge()
        if request.path in PUBLIC_PATHS or request.method == "OPTIONS":
            return
        if ui.owns(request.path):
            return  # the page's own session stands in for the bearer header (adapters/ui.py)
        g.principal = authenticator.authenticate(request.headers.get("Authorization"))

    problems.register(app)
    observability.install(app, runtime)
    for blueprint in (http_jobs.bp, observability.bp, openapi.bp, a2a.bp, mcp.bp, ui.bp):
        app.register_blueprint(blueprint)
    app.wsgi_app = FastPath(app.wsgi_app, runtime, authenticator)  # type: ignore[method-assign]
    return app
