"""Which remote URLs a job may call, with which credentials, and one JSON-RPC exchange with them.

Credentials come from settings only (`TASKS_BACKEND_REMOTE_CREDENTIALS`: URL prefix -> `Authorization` value,
the longest matching prefix wins), never from a job's params or records, so they reach no log or handle.
Every URL passes the push targets' address guard (`TASKS_BACKEND_PUSH_ALLOW_PRIVATE` lets tests use loopback), and
every connection is pinned to an address the guard checked (`push.targets.PinnedTransport`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import queue
import socket
import threading
from typing import Any

import httpx

from ..config import Settings
from ..push.targets import (
    PinnedTransport,
    Resolver,
    TargetRefused,
    TargetUnresolved,
    parse_target,
    resolve_target,
    system_resolve,
)

_ids = itertools.count(1)


class RemoteError(Exception):
    """The remote could not be reached, or answered with something other than a JSON-RPC result."""

    def __init__(self, message: str, code: int | None = None, status: int | None = None) -> None:
        self.code, self.status = code, status
        super().__init__(message)


def authorization(settings: Settings, url: str) -> str | None:
    """The `Authorization` value configured for `url` (longest matching prefix), or None."""
    best = max((p for p, _ in settings.remote_credentials if url.startswith(p)), key=len, default=None)
    return None if best is None else dict(settings.remote_credentials)[best]


class RemoteChannel:
    """JSON-RPC over HTTP POST to remotes, with their configured credentials; one httpx client per owner."""

    def __init__(self, settings: Settings, resolve: Resolver = system_resolve) -> None:
        self.settings, self.resolve = settings, resolve
        self.http = httpx.Client(transport=PinnedTransport(settings.push_allow_private, resolve),
                                 timeout=settings.remote_timeout_s, follow_redirects=False)

    def guard(self, url: str) -> None:
        """Refuse a URL the push targets' guard refuses (`TargetRefused`, a 4xx to whoever supplied it); a host
        that does not resolve now is `RemoteError`, as an unreachable one is (DNS may answer again)."""
        try:
            resolve_target(url, self.settings.push_allow_private, self.resolve)
        except TargetUnresolved as exc:
            raise _unreachable(url, exc) from exc

    def headers(self, url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        """What every request to `url` carries: JSON-RPC content types and its configured credentials."""
        sent = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **(extra or {})}
        if (auth := authorization(self.settings, url)) is not None:
            sent["Authorization"] = auth
        return sent

    def call(self, url: str, method: str, params: dict[str, Any], headers: dict[str, str] | None = None,
             ) -> tuple[dict[str, Any], httpx.Headers]:
        """(result, response headers) of one request; `RemoteError` for a transport fault or a JSON-RPC error,
        `TargetRefused` for a URL (or a host's address at connection time) the guard refuses."""
        parse_target(url)
        rid = next(_ids)
        try:
            response = self.http.post(url, content=json.dumps(
                {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}), headers=self.headers(url, headers))
        except (httpx.HTTPError, TargetUnresolved) as exc:
            raise _unreachable(url, exc) from exc
        reply = _reply(response, rid)
        if reply is None:
            raise RemoteError(f"{url} answered {method} with HTTP {response.status_code}", status=response.status_code)
        if "error" in reply:
            error = reply["error"] if isinstance(reply["error"], dict) else {}
            raise RemoteError(str(error.get("message") or "error"), code=error.get("code"),
                              status=response.status_code)
        result = reply.get("result")
        return (result if isinstance(result, dict) else {}), response.headers

    def send(self, url: str, message: dict[str, Any], headers: dict[str, str]) -> int:
        """POST one notification or response (the remote answers it with no result); returns the HTTP status."""
        parse_target(url)
        try:
            response = self.http.post(url, content=json.dumps({"jsonrpc": "2.0", **message}),
                                      headers=self.headers(url, headers))
        except (httpx.HTTPError, TargetUnresolved) as exc:
            raise _unreachable(url, exc) from exc
        return response.status_code

    def notify(self, url: str, method: str, headers: dict[str, str]) -> None:
        self.send(url, {"method": method}, headers)

    def stream(self, url: str, method: str, params: dict[str, Any], headers: dict[str, str],
               read_s: float) -> EventStream:
        """Open a request whose answer is an SSE stream of JSON-RPC messages (see `EventStream`)."""
        parse_target(url)
        return EventStream(self, url, {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params},
                           self.headers(url, headers), read_s)

    def close(self) -> None:
        self.http.close()


#: What `EventStream.next` answers once the stream ended (or failed).
END: dict[str, Any] = {}


class EventStream:
    """The JSON-RPC messages of one SSE answer, read by a thread of its own, so that a reader can wait for the
    next with a deadline, and end the stream from any thread (`close`). `status`: the HTTP status, once known;
    a plain JSON answer (an error, say) comes as the one message."""

    def __init__(self, channel: RemoteChannel, url: str, request: dict[str, Any], headers: dict[str, str],
                 read_s: float) -> None:
        self.id, self.url, self.status = request["id"], url, 0
        self._messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self._socket: socket.socket | None = None
        self._closed = threading.Event()
        timeout = httpx.Timeout(channel.settings.remote_timeout_s, read=read_s)
        threading.Thread(target=self._read, args=(channel.http, request, headers, timeout), daemon=True,
                         name="remote-stream").start()

    def _read(self, http: httpx.Client, request: dict[str, Any], headers: dict[str, str],
              timeout: httpx.Timeout) -> None:
        try:
            with http.stream("POST", self.url, content=json.dumps(request), headers=headers,
                             timeout=timeout) as response:
                self.status = response.status_code
                stream = response.extensions.get("network_stream")
                self._socket = stream.get_extra_info("socket") if stream is not None else None
                if self._closed.is_set():
                    return
                if not response.headers.get("content-type", "").startswith("text/event-stream"):
                    with contextlib.suppress(ValueError):
                        self._put(json.loads(response.read()))
                    return
                for line in response.iter_lines():
                    if line.startswith("data:") and line[5:].strip():
                        with contextlib.suppress(ValueError):
                            self._put(json.loads(line[5:].strip()))
        except (httpx.HTTPError, OSError, TargetRefused):
            pass  # unreachable, refused by the guard at connection, timed out or closed: the stream simply ends
        finally:
            self._messages.put(END)

    def _put(self, message: Any) -> None:
        if isinstance(message, dict):
            self._messages.put(message)

    def next(self, timeout: float) -> dict[str, Any] | None:
        """The next message, `END` once the stream ended, or None if nothing came within `timeout` seconds."""
        try:
            return self._messages.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None

    def close(self) -> None:
        """End the stream: the reading thread's blocked read returns (a shutdown wakes it, a close would not)."""
        self._closed.set()
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.shutdown(socket.SHUT_RDWR)


def _unreachable(url: str, exc: Exception) -> RemoteError:
    why = "its host does not resolve" if isinstance(exc, TargetUnresolved) else type(exc).__name__
    return RemoteError(f"{url} unreachable: {why}")


def _reply(response: httpx.Response, rid: int) -> dict[str, Any] | None:
    """The JSON-RPC response to request `rid`, from a JSON body or an SSE stream; None if there is none."""
    kind = response.headers.get("content-type", "")
    try:
        if kind.startswith("text/event-stream"):
            for line in response.text.splitlines():
                if line.startswith("data:"):
                    message = json.loads(line[5:].strip() or "null")
                    if isinstance(message, dict) and message.get("id") == rid:
                        return message
            return None
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) and ("result" in body or "error" in body) else None
