"""One way in: every route of every protocol, fast or not, meets the same rules at the entrance."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from typing import Any

import httpx
import pytest
from flask import Flask
from werkzeug.test import EnvironBuilder, run_wsgi_app

from adapters import fast_path
from adapters.app import create_app
from adapters.entrance import PUBLIC_PATHS, RPC_PATHS, Admission, client_address, forwarded_scheme
from adapters.ui import pages as ui
from tasks_backend.errors import ServiceUnavailable
from tasks_backend.service.runtime import Runtime
from tasks_backend.serving.logs import JsonFormatter
from tests.conftest import ALICE

JOB = "8c1e7d0e-52a5-4a8e-a6f1-2b0d0a6c4b11"
EVIL = "http://evil.example.com"


def every_route(app: Flask) -> list[tuple[str, str]]:
    """(method, path) of every route the app serves, with a job id filled in, plus the fast routes."""
    routes = set()
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            routes.add((method, rule.rule.replace("<job_id>", JOB)))
    fast = {(method, path.replace("<job_id>", JOB)) for method, path in fast_path.ROUTES}
    assert fast <= routes  # the fast routes are routes like any other, and met by the same rules
    return sorted(routes)


def call(app: Flask, method: str, path: str, headers: dict[str, str], data: bytes | None = None) -> tuple[
        int, dict[str, str], Any]:
    body = data if data is not None else (b'{"jsonrpc":"2.0","id":1,"method":"x"}' if method == "POST" else None)
    environ = EnvironBuilder(method=method, path=path, headers=headers, data=body,
                             content_type="application/json" if body is not None else None,
                             environ_base={"REMOTE_ADDR": "127.0.0.1"}).get_environ()
    chunks, status, out = run_wsgi_app(app.wsgi_app, environ)
    raw = b"".join(chunks)
    headers = dict(out)
    is_json = raw and "json" in headers.get("Content-Type", "")
    return int(status.split()[0]), headers, json.loads(raw) if is_json else raw


def family(path: str) -> str:
    return RPC_PATHS.get(path, "http")


def assert_refused_alike(app: Flask, routes: list[tuple[str, str]], status: int, headers: dict[str, str],
                         data: bytes | None = None) -> None:
    bodies: dict[str, Any] = {}
    for method, path in routes:
        code, out, body = call(app, method, path, headers, data)
        assert code == status, (method, path, code, body)
        if family(path) == "http":
            assert out["Content-Type"] == "application/problem+json", (method, path)
            assert body["status"] == status
        else:
            assert out["Content-Type"] == "application/json" and body["jsonrpc"] == "2.0", (method, path)
            assert body["id"] is None and "error" in body
        assert bodies.setdefault(family(path), body) == body, (method, path)  # identical within a protocol


def test_a_bad_token_is_refused_alike_on_every_private_route(flask_app: Flask) -> None:
    routes = [r for r in every_route(flask_app) if r[1] not in PUBLIC_PATHS and not ui.owns(r[1])]
    assert_refused_alike(flask_app, routes, 401, {"Authorization": "Bearer wrong"})
    for method, path in routes:
        assert call(flask_app, method, path, {"Authorization": "Bearer wrong"})[1]["WWW-Authenticate"]
    # The web page knows its caller by a session cookie, never by a bearer header: without a session
    # every page sends the person to sign in, and nothing else answers with success. A one-time answer link's
    # page is its own credential: one that was never made is gone (410), a post without the form's check refused.
    for method, path in every_route(flask_app):
        if ui.owns(path) and not path.startswith(("/ui/signin", "/ui/static/")):
            code = call(flask_app, method, path, {"Authorization": "Bearer alice-token"})[0]
            expected = (403, 410) if path.startswith("/ui/answer/") else (303, 401, 403)
            assert code in expected, (method, path, code)


def test_a_disallowed_origin_is_refused_alike_on_every_route(flask_app: Flask) -> None:
    assert_refused_alike(flask_app, every_route(flask_app), 403, {**ALICE, "Origin": EVIL})


def test_an_allowed_origin_and_no_origin_pass(flask_app: Flask, runtime: Runtime) -> None:
    assert call(flask_app, "GET", f"/v1/jobs/{JOB}", ALICE)[0] == 404
    own = runtime.settings.public_url
    assert call(flask_app, "GET", f"/v1/jobs/{JOB}", {**ALICE, "Origin": own})[0] == 404
    allowed = create_app(runtime=dataclasses.replace(runtime, settings=runtime.settings.with_(
        allowed_origins=("https://app.example.com",))))
    assert call(allowed, "GET", f"/v1/jobs/{JOB}", {**ALICE, "Origin": "https://APP.example.com"})[0] == 404
    assert call(allowed, "GET", f"/v1/jobs/{JOB}", {**ALICE, "Origin": EVIL})[0] == 403


@pytest.mark.parametrize("origin", ["http://[", "http://[::1", "https://a]b.example"])
def test_an_origin_that_is_no_url_is_refused_on_every_route_without_a_traceback(
        flask_app: Flask, live_url: str, origin: str, caplog: pytest.LogCaptureFixture) -> None:
    """Over real HTTP, without a token: a 403 in each route's protocol, as for any origin not allowed, and nothing
    logged above a warning (no traceback)."""
    caplog.set_level(logging.INFO)
    routes = [*every_route(flask_app), ("OPTIONS", "/v1/jobs")]
    with httpx.Client(base_url=live_url, timeout=10) as http:
        for method, path in routes:
            body = b'{"jsonrpc":"2.0","id":1,"method":"x"}' if method == "POST" else None
            answer = http.request(method, path, headers={"Origin": origin}, content=body)
            assert answer.status_code == 403, (method, path, answer.status_code, answer.text[:300])
            if family(path) == "http":
                assert answer.headers["Content-Type"] == "application/problem+json", (method, path)
                assert answer.json()["type"].endswith("/origin-not-allowed"), (method, path)
            else:
                assert answer.json()["error"] and answer.json()["id"] is None, (method, path)
    loud = [r for r in caplog.records if r.levelno > logging.WARNING or r.exc_info]
    assert not loud, [r.getMessage() for r in loud]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) <= len(routes), [r.getMessage() for r in warnings]  # one line a request at most


def test_an_oversized_body_is_refused_alike_on_every_route(flask_app: Flask, runtime: Runtime) -> None:
    big = b"{" + b" " * runtime.settings.max_body_bytes + b"}"
    assert_refused_alike(flask_app, every_route(flask_app), 413, ALICE, big)


def test_a_check_added_at_the_entrance_applies_to_every_route(runtime: Runtime) -> None:
    seen: list[tuple[str, str, str | None]] = []

    def closed(admission: Admission) -> None:
        seen.append((admission.method, admission.path, admission.principal and admission.principal.name))
        raise ServiceUnavailable("closed for the test")

    app = create_app(runtime=runtime, checks=[closed])
    routes = every_route(app)
    assert_refused_alike(app, routes, 503, ALICE)
    assert {(m, p) for m, p, _ in seen} == set(routes)
    assert {who for _, p, who in seen if p not in PUBLIC_PATHS and not ui.owns(p)} == {"alice"}
    assert all(call(app, m, p, ALICE)[1]["Retry-After"] for m, p in routes)


def test_a_check_sees_a_failed_authentication_first(runtime: Runtime) -> None:
    failures: list[str] = []

    def count(admission: Admission) -> None:
        if admission.failure is not None:
            failures.append(admission.client_address)

    app = create_app(runtime=runtime, checks=[count])
    assert call(app, "GET", f"/v1/jobs/{JOB}", {"Authorization": "Bearer wrong"})[0] == 401
    assert call(app, "POST", "/mcp", {"Authorization": "Bearer wrong"})[0] == 401
    assert call(app, "GET", f"/v1/jobs/{JOB}", ALICE)[0] == 404
    assert failures == ["127.0.0.1", "127.0.0.1"]


@pytest.mark.parametrize(("forwarded", "trusted", "expected"), [
    (None, 0, "192.0.2.1"),
    ("203.0.113.5", 0, "192.0.2.1"),  # not read unless proxies are trusted
    ("203.0.113.5", 1, "203.0.113.5"),
    ("198.51.100.1, 203.0.113.5", 1, "203.0.113.5"),  # the client wrote the left entry
    ("198.51.100.1, 203.0.113.5", 2, "198.51.100.1"),
    ("203.0.113.5", 2, "192.0.2.1"),  # fewer entries than proxies: not through them
    (" , 203.0.113.5 ,", 1, "203.0.113.5"),
])
def test_the_client_address_believes_only_trusted_proxies(forwarded: str | None, trusted: int, expected: str) -> None:
    environ = {"REMOTE_ADDR": "192.0.2.1", **({"HTTP_X_FORWARDED_FOR": forwarded} if forwarded is not None else {})}
    assert client_address(environ, trusted) == expected


@pytest.mark.parametrize(("proto", "trusted", "expected"), [
    (None, 1, None),
    ("https", 0, None),  # not read unless proxies are trusted, whoever the peer is
    ("https", 1, "https"),
    ("HTTP", 1, "http"),
    ("http, https", 1, "https"),  # appended: the outermost proxy's entry, not the client's
    ("https, http", 2, "https"),
    ("https", 2, "https"),  # set, not appended, by the proxies: its one entry
    ("gopher", 1, None),
    (" , ", 1, None),
])
def test_the_scheme_believes_the_same_proxies_as_the_address(proto: str | None, trusted: int,
                                                             expected: str | None) -> None:
    environ = {"REMOTE_ADDR": "192.0.2.1", **({"HTTP_X_FORWARDED_PROTO": proto} if proto is not None else {})}
    assert forwarded_scheme(environ, trusted) == expected


def test_every_answer_carries_a_request_id_and_every_log_line_too(runtime: Runtime) -> None:
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(JsonFormatter().format(record))

    logger = logging.getLogger("tests.entrance")
    logger.addHandler(Collect())
    app = create_app(runtime=runtime, checks=[lambda admission: logger.warning("checked %s", admission.path)])
    try:
        for method, path in every_route(app):
            _, out, _ = call(app, method, path, {**ALICE, "X-Request-Id": "req-42"})
            assert out["X-Request-Id"] == "req-42", (method, path)
            made = call(app, method, path, ALICE)[1]["X-Request-Id"]
            assert len(made) == 32 and made != "req-42"
    finally:
        logger.handlers.clear()
    assert lines and all(json.loads(line).get("requestId") for line in lines)
    # A value that could forge a log line or a header is replaced, not echoed.
    assert call(app, "GET", "/healthz", {"X-Request-Id": "a b\"c"})[1]["X-Request-Id"] != "a b\"c"


@pytest.mark.parametrize("path", ["/v1/jobs", "/mcp", "/a2a"])
def test_a_chunked_body_over_the_limit_is_413_not_a_cut(flask_app: Flask, runtime: Runtime, path: str) -> None:
    big = json.dumps({"operation": "test.noop", "params": {"pad": "x" * runtime.settings.max_body_bytes}}).encode()
    environ = EnvironBuilder(method="POST", path=path, headers={**ALICE, "Content-Type": "application/json",
                                                                "Transfer-Encoding": "chunked"}).get_environ()
    environ.pop("CONTENT_LENGTH", None)
    environ["wsgi.input"] = io.BytesIO(big)
    environ["wsgi.input_terminated"] = True
    _, status, _ = run_wsgi_app(flask_app.wsgi_app, environ)
    assert status.startswith("413")
