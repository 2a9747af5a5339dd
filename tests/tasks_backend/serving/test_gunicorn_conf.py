"""`tasks-backend web`'s gunicorn settings: no peer, loopback included, sets the scheme or the mount point; a
worker reads its settings as plain attributes."""

from __future__ import annotations

import re
import socket
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gunicorn
import pytest
from gunicorn.config import Config
from gunicorn.http import wsgi
from gunicorn.http.parser import RequestParser

from tasks_backend.serving import gunicorn_conf
from tasks_backend.serving.access_log import AccessLogger

RAW = (b"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nX-Forwarded-Proto: https\r\nSCRIPT_NAME: /elsewhere\r\n"
       b"PATH_INFO: /admin\r\n\r\n")


def started(**overrides: str) -> Config:
    cfg = Config()
    for name in ("secure_scheme_headers", "forwarder_headers"):
        cfg.set(name, getattr(gunicorn_conf, name))
    for name, value in overrides.items():
        cfg.set(name, value)
    gunicorn_conf.on_starting(SimpleNamespace(cfg=cfg))
    return cfg


def test_no_peer_sets_the_scheme_or_the_mount_point() -> None:
    cfg = started()
    request = next(iter(RequestParser(cfg, iter([RAW]), ("127.0.0.1", 5000))))
    assert request.scheme == "http"
    assert [name for name, _ in request.headers] == ["HOST", "X-FORWARDED-PROTO"]


def test_with_nothing_to_believe_the_peer_is_not_looked_up() -> None:
    assert started().forwarded_allow_ips == ["*"]


def test_an_operators_forwarder_header_keeps_gunicorns_list_of_whom_to_believe() -> None:
    cfg = started(forwarder_headers="REMOTE_USER")
    assert cfg.forwarded_allow_ips == Config().forwarded_allow_ips
    request = next(iter(RequestParser(cfg, iter([RAW.replace(b"SCRIPT_NAME", b"REMOTE_USER")]), ("192.0.2.9", 5000))))
    assert "REMOTE_USER" not in [name for name, _ in request.headers]


#: gunicorn's modules that consult its list of peers to trust, each with nothing to believe from one while both
#: header lists are empty and HTTP/2 is off: the header policy (both HTTP/1 parsers, the ASGI protocol's use of it),
#: and HTTP/2's. The settings module defines the list.
TRUST_READERS = {"config.py", "http/message.py", "asgi/protocol.py", "http2/negotiation.py", "http2/request.py"}


def test_gunicorn_reads_whom_to_trust_nowhere_else() -> None:
    """Trusting every peer is neutral only while gunicorn asks the list nothing but which forwarded headers to
    believe: a release that reads it elsewhere fails here, for someone to look at what it reads it for."""
    root = Path(gunicorn.__file__).parent
    uses = re.compile(r"forwarded_allow|_ip_in_allow_list|_peer_is_trusted_proxy|_peer_trusted_for_forwarded|"
                      r"peer_trusted_for_h2c")
    readers = {str(path.relative_to(root)) for path in root.rglob("*.py")
               if any(uses.search(line.split("#", 1)[0]) for line in path.read_text().splitlines())}
    assert readers <= TRUST_READERS, readers - TRUST_READERS


def test_a_forked_worker_reads_each_setting_without_gunicorns_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request's whole way through a worker (its parse, its WSGI environ and response, the access line) reads
    no setting through `Config.__getattr__` once the worker has forked, and reads the values the settings hold."""
    cfg = started(limit_request_line="1234", access_log_format=gunicorn_conf.access_log_format,
                  accesslog="-")
    logger = AccessLogger(cfg)
    before = {name: getattr(cfg, name) for name in cfg.settings}
    monkeypatch.setattr(gunicorn_conf, "die_with_parent", lambda sig: None)
    gunicorn_conf.post_fork(SimpleNamespace(cfg=cfg), SimpleNamespace(cfg=cfg))
    fallen_back: list[str] = []
    original = Config.__getattr__

    def counted(self: Config, name: str) -> Any:
        fallen_back.append(name)
        return original(self, name)

    monkeypatch.setattr(Config, "__getattr__", counted)
    assert {name: getattr(cfg, name) for name in cfg.settings} == before
    assert cfg.limit_request_line == 1234
    ours, theirs = socket.socketpair()
    with ours, theirs:
        request = next(iter(RequestParser(cfg, iter([RAW]), ("127.0.0.1", 5000))))
        response, environ = wsgi.create(request, ours, ("127.0.0.1", 5000), ("127.0.0.1", 8000), cfg)
        response.start_response("202 Accepted", [("Content-Type", "application/json")])
        response.write(b"{}")
        response.close()
        logger.access(response, request, environ, timedelta(microseconds=900))
        cfg.pre_request(SimpleNamespace(log=logger), request)
    assert [name for name in fallen_back if name in cfg.settings] == []
