"""The gunicorn worker `tasks-backend web` runs: gevent, with read deadlines for slow clients.

An open event stream, a blocking send or a slow client costs a greenlet here, not one of a handful of threads, so
they cannot take the capacity that answers polls and submits (gthread gave each a thread for as long as it lasted,
and 18 event streams or 20 sockets sending one header line every 2 s were enough to stop `/healthz`).

Deadlines: the whole request head must arrive within `TASKS_BACKEND_HEADER_TIMEOUT` seconds (also how long an idle
kept-alive connection waits for its next request), and the whole body within `TASKS_BACKEND_BODY_TIMEOUT` (it is
read here, before the application runs, and answered 408 when late).
"""

from __future__ import annotations

import contextlib
import io
import warnings
from http import HTTPStatus
from typing import Any

import gevent
from gevent.monkey import MonkeyPatchWarning
from gunicorn.http import errors as http_errors
from gunicorn.workers.ggevent import GeventWorker

from ..config import Settings
from ..errors import PROBLEM_TYPE_BASE
from ..model.wire import wire_json


class DeadlineGeventWorker(GeventWorker):  # type: ignore[misc]
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = Settings.from_env()
        self.header_timeout_s = settings.header_timeout_s
        self.body_timeout_s = settings.body_timeout_s
        self.max_body = settings.max_body_bytes

    def patch(self) -> None:
        # gunicorn patches after the master imported the app's packages. gevent then warns that `ssl` was imported
        # first; the modules it names (redis.asyncio, PyJWT's JWKS client) hold `ssl` names this app never uses,
        # and everything it uses looks `ssl` up at call time, so the warning is noise in every worker's log.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MonkeyPatchWarning)
            super().patch()
        cooperative_redis_timeouts()

    def handle_exit(self, sig: int, frame: Any) -> None:
        # SIGTERM (a deploy): gunicorn stops accepting and waits for the requests in flight, so the held streams
        # and blocking sends end now rather than holding the process for its graceful timeout. Out of the
        # signal handler, as gunicorn does for SIGQUIT.
        super().handle_exit(sig, frame)
        # A worker asked to stop while it boots (a reload, a stop right after a start) has no app loaded yet.
        runtime = getattr(getattr(self, "wsgi", None), "extensions", {}).get("tasks_backend")
        if runtime is not None:
            gevent.spawn(runtime.stop_streams)

    def timeout_ctx(self) -> gevent.Timeout:
        # gunicorn reads each request head inside this; on expiry (no exception) the connection is closed.
        return gevent.Timeout(self.header_timeout_s, False)

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> Any:
        length, chunked = _body_framing(req)
        if length is not None and length > self.max_body:
            req.force_close()  # the application answers 413 without reading it; nobody reads it after
        elif chunked or length:
            if req._expected_100_continue:
                sock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                req._expected_100_continue = False
            try:
                with gevent.Timeout(self.body_timeout_s):
                    data = req.body.read(self.max_body + 1)
            except gevent.Timeout:
                self.log.info("request body from %s not received within %ss", addr, self.body_timeout_s)
                _send_timeout(sock, self.body_timeout_s)
                raise StopIteration("body read deadline") from None  # gunicorn closes the connection
            if len(data) > self.max_body:
                req.force_close()  # the rest stays unread: the connection cannot be reused
            req.body = io.BytesIO(data)
        return super().handle_request(listener_name, req, sock, addr)

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        for kind, status, detail in _PARSE_ERRORS:
            if isinstance(exc, kind) and not isinstance(exc, http_errors.ConfigurationProblem):
                self.log.warning("invalid request from %s: %s (%s)", (addr or ("",))[0], type(exc).__name__, status)
                _send_problem(client, status, "about:blank", detail)
                return
        super().handle_error(req, client, addr, exc)


def _body_framing(req: Any) -> tuple[int | None, bool]:
    length, chunked = None, False
    for name, value in req.headers:
        if name == "CONTENT-LENGTH":
            length = int(value) if value.isdigit() else None
        elif name == "TRANSFER-ENCODING":
            chunked = True
    return length, chunked


def _send_timeout(sock: Any, seconds: float) -> None:
    _send_problem(sock, 408, PROBLEM_TYPE_BASE + "request-timeout",
                  f"The request body did not arrive within {seconds:g} seconds.")


#: gunicorn's own refusals of a request it could not parse, answered as problem+json like every other error
#: (gunicorn writes them as HTML). Nothing of the request is echoed back.
_PARSE_ERRORS: tuple[tuple[type[Exception], int, str], ...] = (
    (http_errors.LimitRequestLine, 414, "The request line is longer than the server accepts."),
    (http_errors.LimitRequestHeaders, 431, "The request headers are larger or more numerous than the server accepts."),
    (http_errors.UnsupportedTransferCoding, 501, "The request's transfer coding is not supported."),
    (http_errors.ExpectationFailed, 417, "The request's Expect header cannot be met."),
    (http_errors.ParseException, 400, "The request could not be parsed as HTTP/1.1."),
)


def _send_problem(sock: Any, status: int, problem_type: str, detail: str) -> None:
    phrase = HTTPStatus(status).phrase
    body = wire_json({"type": problem_type, "title": phrase, "status": status, "detail": detail})
    head = (f"HTTP/1.1 {status} {phrase}\r\nContent-Type: application/problem+json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    with contextlib.suppress(OSError):
        sock.sendall(head + body)


def cooperative_redis_timeouts() -> None:
    """Give the store's Redis connections Python-level socket timeouts as well as kernel ones.

    The store sets `SO_RCVTIMEO`/`SO_SNDTIMEO` on blocking sockets (cheaper than Python's timeouts); under gevent
    every socket is non-blocking and waits in the hub, where kernel timeouts never fire, so a stalled Redis would
    hang a request instead of answering 503. gevent enforces a Python-level timeout without extra system calls."""
    from ..store import connect as store

    cls = store.KernelTimeoutConnection
    if getattr(cls, "_cooperative", False):
        return
    original = cls.__init__

    def __init__(self: Any, *, io_timeout_s: float, **kwargs: Any) -> None:
        original(self, io_timeout_s=io_timeout_s, **kwargs)
        self.socket_timeout = io_timeout_s

    cls.__init__ = __init__  # type: ignore[method-assign]
    cls._cooperative = True  # type: ignore[attr-defined]
