"""The Flask app factory: every protocol adapter over one runtime, one authenticator, one error map."""

from __future__ import annotations

from flask import Flask, Response, g, request

from tasks_backend.config import Settings
from tasks_backend.errors import PayloadTooLarge, RateLimited
from tasks_backend.runtime import Runtime, build_runtime

from . import a2a, http_jobs, mcp, observability, openapi, problems
from .fast_path import FastPath
from .limits_http import ADMITTED, jsonrpc_refusal

#: Paths anyone may read: probes and the API description.
PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json", "/.well-known/agent-card.json"})


def create_app(settings: Settings | None = None, runtime: Runtime | None = None) -> Flask:
    runtime = runtime or build_runtime(settings)
    app = Flask("tasks_backend")
    app.config["MAX_CONTENT_LENGTH"] = runtime.settings.max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["tasks_backend"] = runtime
    authenticator = runtime.authenticator()
    gate = runtime.gate(authenticator)

    @app.before_request
    def _authenticate() -> Response | None:
        if request.content_length and request.content_length > runtime.settings.max_body_bytes:
            raise PayloadTooLarge()
        if request.path in PUBLIC_PATHS or request.method == "OPTIONS":
            return None
        # Authentication and the per-request limits (rate, failed auth per address): one call per request.
        try:
            g.principal = request.environ.get(ADMITTED) or gate.authenticate(
                request.headers.get("Authorization"), request.remote_addr)
        except RateLimited as exc:
            refusal = jsonrpc_refusal(exc, request.path)
            if refusal is None:
                raise
            status, payload, headers = refusal
            return Response(payload, status=status, mimetype="application/json", headers=headers)
        return None

    problems.register(app)
    observability.install(app, runtime)
    for blueprint in (http_jobs.bp, observability.bp, openapi.bp, a2a.bp, mcp.bp):
        app.register_blueprint(blueprint)
    app.wsgi_app = FastPath(app.wsgi_app, runtime, authenticator)  # type: ignore[method-assign]
    return app
