"""Webhooks: one POST with a deadline, to a target the guard allows (`targets`).

The guard runs when a config is created (a clear error for the caller) and again on every delivery, where the
connection is made by `targets.connect_checked`: resolved once, checked, and connected to a checked address.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from .targets import Resolver, connect_checked, parse_target, system_resolve

#: Bytes of a receiver's answer that are read (and thrown away) before the connection is closed.
MAX_ANSWER_BYTES = 64 * 1024


# -- one POST ----------------------------------------------------------------------------------
class _Deadline:
    """A total time limit on one HTTP exchange.

    Socket timeouts bound each read, not their sum: a receiver sending a byte a second would hold
    the connection for as long as it likes. At the deadline a timer shuts the socket down, which
    ends any read or write in progress. The lock keeps the timer off a descriptor that was closed
    (and may have been reused) once the exchange ended.
    """

    def __init__(self, seconds: float) -> None:
        self.expires = time.monotonic() + seconds
        self.fired = False
        self._fd = -1
        self._over = False
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def remaining(self) -> float:
        left = self.expires - time.monotonic()
        if left <= 0:
            raise TimeoutError("the push deadline passed")
        return left

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._fd = sock.fileno()

    def _fire(self) -> None:
        with self._lock:
            if self._over:
                return
            self.fired = True
            if self._fd >= 0:
                sock = socket.socket(fileno=self._fd)
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                finally:
                    sock.detach()

    def __enter__(self) -> _Deadline:
        self._timer = threading.Timer(max(0.0, self.expires - time.monotonic()), self._fire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._lock:
            self._over = True
        if self._timer is not None:
            self._timer.cancel()


def post_event(config: Mapping[str, Any], body: dict[str, Any] | bytes, *, allow_private: bool, timeout_s: float,
               headers: Mapping[str, str] | None = None, resolve: Resolver = system_resolve) -> int:
    """POST one body as JSON (or as the exact bytes given) to a subscription's `url`, with the subscriber's
    `headers`; returns the HTTP status.

    The whole exchange (connect, send, status line, headers and body) ends within `timeout_s`, or
    raises `TimeoutError`. Redirects are not followed: a 3xx is a failed delivery, never a second
    request elsewhere. Raises `TargetRefused`, `OSError` or `http.client.HTTPException` otherwise.
    """
    deadline = _Deadline(timeout_s)
    url = config["url"]
    scheme, host, port = parse_target(url)
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    # `Connection: close`: the answer ends when the receiver closes, so reading it cannot wait on keep-alive.
    sent = {"Content-Type": "application/json", "User-Agent": "tasks-backend-push", "Connection": "close",
            **(headers or {})}
    conn: http.client.HTTPConnection
    if scheme == "https":
        conn = http.client.HTTPSConnection(host, port, timeout=timeout_s)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout_s)

    # Connect to an address that passed the guard; Host and TLS SNI still use the name.
    def pinned(addr: tuple[str, int], timeout: float | None, source: Any = None) -> socket.socket:
        sock = connect_checked(host, addr[1], allow_private=allow_private, timeout=deadline.remaining(),
                               source=source, resolve=resolve)
        deadline.watch(sock)
        return sock

    conn._create_connection = pinned  # type: ignore[attr-defined]
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    try:
        with deadline:
            conn.request("POST", path, body=data, headers=sent)
            response = conn.getresponse()
            response.read(MAX_ANSWER_BYTES)
            return response.status
    except (OSError, http.client.HTTPException) as exc:
        if deadline.fired:
            raise TimeoutError(f"no complete answer within {timeout_s:g} s") from exc
        raise
    finally:
        conn.close()
