"""Which remote URLs a job may call, with which credentials, and one JSON-RPC exchange with them.

Credentials come from settings only (`TASKS_BACKEND_REMOTE_CREDENTIALS`: URL prefix -> `Authorization` value,
the longest matching prefix wins), never from a job's params or records, so they reach no log or handle.
Every URL passes the push targets' address guard (`TASKS_BACKEND_PUSH_ALLOW_PRIVATE` lets tests use loopback), and
every connection is pinned to an address the guard checked (`push.targets.PinnedTransport`).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx

from ..config import Settings
from ..push.targets import PinnedTransport, Resolver, parse_target, resolve_target, system_resolve

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
        """Refuse a URL the push targets' guard refuses (`TargetRefused`, a 4xx to whoever supplied it)."""
        resolve_target(url, self.settings.push_allow_private, self.resolve)

    def call(self, url: str, method: str, params: dict[str, Any], headers: dict[str, str] | None = None,
             ) -> tuple[dict[str, Any], httpx.Headers]:
        """(result, response headers) of one request; `RemoteError` for a transport fault or a JSON-RPC error,
        `TargetRefused` for a URL (or a host's address at connection time) the guard refuses."""
        parse_target(url)
        rid = next(_ids)
        sent = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                **(headers or {})}
        if (auth := authorization(self.settings, url)) is not None:
            sent["Authorization"] = auth
        try:
            response = self.http.post(url, content=json.dumps(
                {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}), headers=sent)
        except httpx.HTTPError as exc:
            raise RemoteError(f"{url} unreachable: {type(exc).__name__}") from exc
        reply = _reply(response, rid)
        if reply is None:
            raise RemoteError(f"{url} answered {method} with HTTP {response.status_code}", status=response.status_code)
        if "error" in reply:
            error = reply["error"] if isinstance(reply["error"], dict) else {}
            raise RemoteError(str(error.get("message") or "error"), code=error.get("code"),
                              status=response.status_code)
        result = reply.get("result")
        return (result if isinstance(result, dict) else {}), response.headers

    def notify(self, url: str, method: str, headers: dict[str, str]) -> None:
        parse_target(url)
        sent = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers}
        if (auth := authorization(self.settings, url)) is not None:
            sent["Authorization"] = auth
        try:
            self.http.post(url, content=json.dumps({"jsonrpc": "2.0", "method": method}), headers=sent)
        except httpx.HTTPError as exc:
            raise RemoteError(f"{url} unreachable: {type(exc).__name__}") from exc

    def close(self) -> None:
        self.http.close()


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
