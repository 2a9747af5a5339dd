"""The one way in: every request, on every route of every protocol, passes here before anything else.

In this order: 1. a request id (`X-Request-Id` kept when it is a sane token, else made; echoed, and on every
log line of the request); 2. the Origin rule (a request carrying `Origin` must name an allowed one); 3. the
declared body size (413 before a byte is read); 4. authentication (but for public paths and CORS preflights;
the web page's session cookie counts as a token) and every registered `Check` (the limits), which sees the
principal or the failure; 5. a chunked body, read up to the limit; 6. the hot calls (`fast_path`) answered at
once, everything else handed to Flask with the principal found here (`PRINCIPAL`).
Rule: nothing past here authenticates again; a refusal is answered in its path's protocol (problem+json on
the HTTP routes, a JSON-RPC error with id null and the same status on `/mcp` and `/a2a`).
"""

from __future__ import annotations

import io
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

from tasks_backend.access import request as request_context
from tasks_backend.access.auth import Authenticator, Principal
from tasks_backend.errors import (
    BadRequest,
    OriginNotAllowed,
    PayloadTooLarge,
    TasksBackendError,
    Unauthenticated,
)
from tasks_backend.model.wire import wire_json
from tasks_backend.service.runtime import Runtime
from tasks_backend.serving import logs
from tasks_backend.serving.tracing import SpanKind

from . import jsonrpc, protocol, trace_context
from .fast_path import FastRoutes
from .problems import PROBLEM_JSON, error_parts

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
StartResponse = Callable[..., Any]
log = logging.getLogger(__name__)

#: Paths anyone may read (probes, the API description, the agent card): each adapter names its own.
PUBLIC_PATHS: Set[str] = protocol.PublicPaths()
#: JSON-RPC endpoints, whose refusals are JSON-RPC errors in their protocol's codes.
RPC_PATHS: Mapping[str, str] = protocol.RpcPaths()
#: WSGI environ keys this layer fills for the layers behind it.
PRINCIPAL = "tasks_backend.principal"
REQUEST_ID = "tasks_backend.request_id"
#: Where the entrance leaves the caller's address for what runs behind it (see `client_address`) and for the
#: access log.
CLIENT_ADDRESS = logs.CLIENT_ADDRESS
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:+/=-]{1,128}")


@dataclass
class Admission:
    """What a check sees of a request that got past the Origin rule and the declared body size."""

    environ: dict[str, Any]
    method: str
    path: str
    #: The authenticated caller; None on a public path, a preflight, or when authentication failed.
    principal: Principal | None
    #: Why authentication failed (raised after the checks, unless a check refuses first).
    failure: Unauthenticated | None = None
    #: The caller's address (see `client_address`).
    client_address: str = ""


def client_address(environ: dict[str, Any], trusted_proxies: int) -> str:
    """The caller's address: the connection's peer, or, behind `trusted_proxies` reverse proxies that each
    append the address they saw to X-Forwarded-For, the entry the outermost of them wrote. Entries to the left
    of it were written by the client and are not believed; a request that did not pass through that many
    proxies (too few entries) is known by its peer."""
    peer = str(environ.get("REMOTE_ADDR") or "")
    if trusted_proxies <= 0:
        return peer
    hops = [hop.strip() for hop in str(environ.get("HTTP_X_FORWARDED_FOR") or "").split(",")]
    hops = [hop for hop in hops if hop]
    return hops[-trusted_proxies] if len(hops) >= trusted_proxies else peer


def forwarded_scheme(environ: dict[str, Any], trusted_proxies: int) -> str | None:
    """The scheme the client used, behind `trusted_proxies` reverse proxies (the same ones `client_address`
    believes): X-Forwarded-Proto's entry written by the outermost of them, or its first when the proxies set
    the header rather than appending to it. None: not behind trusted proxies, or nothing (sane) forwarded."""
    if trusted_proxies <= 0:
        return None
    hops = [hop.strip().lower() for hop in str(environ.get("HTTP_X_FORWARDED_PROTO") or "").split(",")]
    hops = [hop for hop in hops if hop]
    if not hops:
        return None
    scheme = hops[-trusted_proxies] if len(hops) >= trusted_proxies else hops[0]
    return scheme if scheme in ("http", "https") else None


#: A check at the door: returns to let the request in, raises a `TasksBackendError` to refuse it.
Check = Callable[[Admission], None]


_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})


def loopback_origin(origin: str) -> bool:
    """An origin on this machine's loopback. DNS rebinding cannot forge one (the browser names the
    attacker's domain in `Origin`), and a page served from loopback is already local."""
    try:
        host = urlsplit(origin).hostname or ""
    except ValueError:
        return False
    return host in _LOOPBACK_HOSTS or f"[{host}]" in _LOOPBACK_HOSTS


def origin_of(url: str) -> str:
    """`scheme://host[:port]` of a URL, lower-cased, as browsers send it in `Origin`."""
    parts = urlsplit(url.strip())
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}" if parts.scheme and parts.netloc else url.strip()


class Entrance:
    def __init__(self, app: WSGIApp, runtime: Runtime, authenticator: Authenticator,
                 checks: Sequence[Check] = (), session_paths: Callable[[str], bool] = lambda _: False,
                 sessions: Callable[[dict[str, Any]], Principal | None] = lambda _: None) -> None:
        self.app, self.authenticator = app, authenticator
        # Authentication and the per-request limits (rate per principal, failed authentication per address).
        self.gate = runtime.gate(authenticator)
        # Paths whose caller is known by a session cookie (the web page), and who a session names.
        self.session_paths, self.sessions = session_paths, sessions
        self.checks: list[Check] = list(checks)
        self.public_paths = protocol.public_paths()
        self.rpc_codes = protocol.rpc_codes()
        self.fast: FastRoutes | None = FastRoutes(runtime)
        #: A span per request, under the caller's trace context when it sends one (when tracing is on).
        self.tracing = runtime.tracing
        settings = runtime.settings
        self.max_body = settings.max_body_bytes
        self.trusted_proxies = settings.trusted_proxies
        # The server's own public origin is allowed: a page it serves itself may call it.
        self.origins = frozenset(origin_of(o) for o in (*settings.allowed_origins, settings.public_url))

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        supplied = environ.get("HTTP_X_REQUEST_ID")
        # os.urandom, not uuid4: a quarter of the cost on every request, the same 128 random bits.
        request_id = supplied if supplied and _REQUEST_ID.fullmatch(supplied) else os.urandom(16).hex()
        environ[REQUEST_ID] = request_id

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            headers.append(("X-Request-Id", request_id))
            if self.tracing.enabled:
                self.tracing.annotate({"http.response.status_code": int(status[:3])})
            return start_response(status, headers, exc_info) if exc_info else start_response(status, headers)

        token = logs.bind_request(request_id)
        bound = None
        started = time.time_ns() if self.tracing.enabled else 0
        try:
            try:
                principal = self._admit(environ)
                # Who asked from where, for the audit trail of whatever this request does (every protocol).
                bound = request_context.bind(request_id, environ.get(CLIENT_ADDRESS, ""))
            except Exception as exc:
                with self._span(environ, started, admitted=False):
                    return self._refuse(environ, start, exc)
            with self._span(environ, started, admitted=True):
                try:
                    answer = self.fast.answer(environ, principal) if self.fast is not None else None
                except Exception as exc:
                    return self._refuse(environ, start, exc)
                if answer is None:
                    return self.app(environ, start)
                headers = list(answer.headers)
                if answer.payload:
                    headers.insert(0, ("Content-Type", "application/json"))
                return _respond(start, answer.status, answer.payload, headers)
        finally:
            if bound is not None:
                request_context.unbind(bound)
            logs.unbind_request(token)

    def _span(self, environ: dict[str, Any], started: int, *, admitted: bool) -> Any:
        """The request's span, from when it arrived, under the context it carries (read once it was let in:
        a refused request's body is never read). A held stream's span ends when its answer starts."""
        if not self.tracing.enabled:
            return self.tracing.span("")
        method, path = environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "")
        found = trace_context.carrier(environ, RPC_PATHS.get(path) if admitted else None, self.max_body)
        return self.tracing.span(trace_context.span_name(method, path), parent=self.tracing.extract(found),
                                 kind=SpanKind.SERVER, start_ns=started, attributes={
                                     "http.request.method": method, "url.path": path,
                                     "tasks_backend.request_id": environ[REQUEST_ID]})

    def _admit(self, environ: dict[str, Any]) -> Principal | None:
        """The caller, once every rule let the request in; raises the refusal otherwise."""
        # First, so that a refused request too is logged with it (the access log's client).
        address = environ[CLIENT_ADDRESS] = client_address(environ, self.trusted_proxies)
        # The scheme by the same rule as the address: gunicorn is told to believe no one's (gunicorn_conf).
        scheme = forwarded_scheme(environ, self.trusted_proxies)
        if scheme is not None:
            environ["wsgi.url_scheme"] = scheme
        origin = environ.get("HTTP_ORIGIN")
        if origin is not None and not self._origin_allowed(origin):
            raise OriginNotAllowed()
        declared = environ.get("CONTENT_LENGTH")
        if declared:
            if not declared.isdigit():
                raise BadRequest("Content-Length is not a number.")
            if int(declared) > self.max_body:
                raise PayloadTooLarge()
        method, path = environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "")
        principal: Principal | None = None
        failure: Unauthenticated | None = None
        private = path not in self.public_paths and method != "OPTIONS"
        if private and self.session_paths(path):
            # None: nobody signed in, and the page sends them to sign in (a token tried there meets the gate).
            principal = self.sessions(environ)
            if principal is not None:
                self.gate.admit(principal, address)
        elif private:
            try:
                principal = self.gate.authenticate(environ.get("HTTP_AUTHORIZATION"), address)
            except Unauthenticated as exc:
                failure = exc
        if self.checks:
            admission = Admission(environ, method, path, principal, failure, address)
            for check in self.checks:
                check(admission)
        if failure is not None:
            raise failure
        environ[PRINCIPAL] = principal
        if not declared and "chunked" in (environ.get("HTTP_TRANSFER_ENCODING") or "").lower():
            self._read_chunked(environ)
        return principal

    def _origin_allowed(self, origin: str) -> bool:
        try:
            return origin_of(origin) in self.origins or loopback_origin(origin)
        except ValueError:  # not a URL at all (`http://[`): no page of an allowed origin sends that
            return False

    def _read_chunked(self, environ: dict[str, Any]) -> None:
        """A body of unknown length, read here up to the limit, so nothing behind sees a cut one."""
        stream = environ["wsgi.input"]
        chunks, size = [], 0
        while size <= self.max_body:
            chunk = stream.read(min(65536, self.max_body + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > self.max_body:
            raise PayloadTooLarge()
        raw = b"".join(chunks)
        environ["wsgi.input"] = io.BytesIO(raw)
        environ["CONTENT_LENGTH"] = str(len(raw))
        environ.pop("HTTP_TRANSFER_ENCODING", None)

    def _refuse(self, environ: dict[str, Any], start: StartResponse, exc: Exception) -> list[bytes]:
        status, problem, headers = error_parts(exc)
        codes = self.rpc_codes.get(environ.get("PATH_INFO", ""))
        if codes is None:
            return _respond(start, status, wire_json(problem), [("Content-Type", PROBLEM_JSON), *headers])
        if isinstance(exc, TasksBackendError):
            body = jsonrpc.error_for(None, exc, codes)
        else:  # already logged by error_parts; nothing about it reaches the caller
            body = jsonrpc.error(None, jsonrpc.INTERNAL_ERROR, "Internal error")
        return _respond(start, status, wire_json(body), [("Content-Type", "application/json"), *headers])


def _respond(start: StartResponse, status: int, payload: bytes, headers: list[tuple[str, str]]) -> list[bytes]:
    start(f"{status} {HTTPStatus(status).phrase}", [*headers, ("Content-Length", str(len(payload)))])
    return [payload]
