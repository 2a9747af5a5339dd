"""The web server's access line: the one `AccessLogger` builds is the one gunicorn's own logger would write."""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from gunicorn.config import Config
from gunicorn.glogging import Logger

from tasks_backend.serving import gunicorn_conf
from tasks_backend.serving.access_log import ACCESS_FORMAT, AccessLogger
from tasks_backend.serving.logs import CLIENT_ADDRESS

NOW = "[04/Dec/2026:19:00:00 +0000]"


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class Response:
    def __init__(self, status: Any = "200 OK", sent: int | None = 312) -> None:
        self.status, self.sent = status, sent
        self.headers = [("Content-Type", "application/json"), ("Content-Length", str(sent or 0))]


class Request:
    headers = [("HOST", "127.0.0.1:8000"), ("USER-AGENT", "curl/8")]


def environ(**extra: Any) -> dict[str, Any]:
    return {"REQUEST_METHOD": "GET", "RAW_URI": "/v1/jobs/abc?x=1", "SERVER_PROTOCOL": "HTTP/1.1",
            "PATH_INFO": "/v1/jobs/abc", "QUERY_STRING": "x=1", "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": "5000",
            "HTTP_USER_AGENT": "curl/8", CLIENT_ADDRESS: "203.0.113.5", "wsgi.url_scheme": "http", **extra}


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler = Lines()
    access = logging.getLogger("gunicorn.access")
    access.addHandler(handler)
    try:
        yield handler
    finally:
        access.removeHandler(handler)


def logger(kind: type[Logger], access_format: str = ACCESS_FORMAT) -> Logger:
    cfg = Config()
    cfg.set("accesslog", "-")
    cfg.set("access_log_format", access_format)
    made = kind(cfg)
    made.now = lambda: NOW  # type: ignore[method-assign]
    return made


CASES = [
    pytest.param(Response(), environ(), id="plain"),
    pytest.param(Response("404 NOT FOUND", 120), environ(HTTP_REFERER="https://example.test/page"), id="referer"),
    pytest.param(Response(202, None), environ(REQUEST_METHOD="POST", RAW_URI="/v1/jobs"), id="int-status-nothing-sent"),
    pytest.param(Response(sent=0), environ(HTTP_USER_AGENT='agent "quoted" \\ x', RAW_URI='/a"b%20c%s'),
                 id="quotes-and-percents"),
    pytest.param(Response(), environ(HTTP_AUTHORIZATION="Basic " + base64.b64encode(b'ann"x:pw').decode()),
                 id="basic-auth-user"),
    pytest.param(Response(), environ(HTTP_AUTHORIZATION="Basic !!not-base64"), id="broken-basic-auth"),
    pytest.param(Response(), {k: v for k, v in environ().items() if k not in (CLIENT_ADDRESS, "HTTP_USER_AGENT")},
                 id="no-client-no-agent"),
]


@pytest.mark.parametrize(("response", "env"), CASES)
def test_the_line_is_the_one_gunicorn_writes(lines: Lines, response: Response, env: dict[str, Any]) -> None:
    took = timedelta(microseconds=900)
    logger(Logger).access(response, Request(), env, took)
    logger(AccessLogger).access(response, Request(), env, took)
    theirs, ours = lines.lines
    assert ours == theirs
    assert ours.startswith(f"{env.get(CLIENT_ADDRESS, '-')} - ")


def test_the_web_servers_settings_use_it() -> None:
    assert gunicorn_conf.logger_class == "tasks_backend.serving.access_log.AccessLogger"
    assert gunicorn_conf.access_log_format == ACCESS_FORMAT


def test_another_format_is_gunicorns_to_build(lines: Lines) -> None:
    """An operator's own `--access-logformat` (here with the response time and a request header) still works."""
    custom = '%(h)s %(D)s "%({user-agent}i)s"'
    logger(AccessLogger, custom).access(Response(), Request(), environ(), timedelta(microseconds=900))
    assert lines.lines == ['127.0.0.1 900 "curl/8"']


def test_without_an_access_log_nothing_is_logged(lines: Lines) -> None:
    cfg = Config()
    cfg.set("access_log_format", ACCESS_FORMAT)
    AccessLogger(cfg).access(Response(), Request(), environ(), timedelta(microseconds=900))
    assert lines.lines == []


def test_a_level_above_info_keeps_the_line_out(lines: Lines) -> None:
    """The line goes to the handlers as `info` would send it: not when the access logger is set above INFO."""
    made = logger(AccessLogger)  # gunicorn's set-up sets the level to INFO
    access = logging.getLogger("gunicorn.access")
    level = access.level
    access.setLevel(logging.WARNING)
    try:
        made.access(Response(), Request(), environ(), timedelta(microseconds=900))
    finally:
        access.setLevel(level)
    assert lines.lines == []
