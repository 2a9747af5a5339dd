"""A forwarding proxy in front of a remote agent, to act when a job's create reaches the remote (a kill of the
worker that sent it, before its answer is back) and to count the creates that went through; it can also hide
methods (answered as unknown: `server/discover` hidden makes this project a 2025-11-25-only server), mute
the event streams some methods answer with (the stream ends without a message), and go silent (`stall`: every
request read and never answered, as a remote that hangs)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

CREATES = ("tools/call", "SendMessage")


class Proxy:
    """Forwards every POST under it to `target` (same path); `on_create`, if set, runs once, after the first
    create was forwarded and before its answer is sent back."""

    def __init__(self, target: str, hide: frozenset[str] = frozenset(), mute: frozenset[str] = frozenset()) -> None:
        self.target = target.rstrip("/")
        self.hide, self.mute = hide, mute
        self.creates = 0
        #: Requests forwarded, by JSON-RPC method.
        self.calls: dict[str, int] = {}
        self.on_create: Callable[[], None] | None = None
        #: Set: every request is read and left unanswered (until `close`); `stalled` counts them by method.
        self.stall = threading.Event()
        self.stalled: dict[str, int] = {}
        self._closed = threading.Event()
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                method = _method(body)
                if proxy.stall.is_set():
                    proxy.stalled[str(method)] = proxy.stalled.get(str(method), 0) + 1
                    proxy._closed.wait()
                    return
                if method in proxy.hide:
                    self._send(404, {"Content-Type": "application/json"}, json.dumps(
                        {"jsonrpc": "2.0", "id": json.loads(body).get("id"),
                         "error": {"code": -32601, "message": "Method not found"}}).encode())
                    return
                with proxy._lock:
                    proxy.calls[str(method)] = proxy.calls.get(str(method), 0) + 1
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                with httpx.stream("POST", proxy.target + self.path, content=body, headers=headers,
                                  timeout=30) as answer:
                    kept = {n: answer.headers[n] for n in ("Content-Type", "Mcp-Session-Id") if n in answer.headers}
                    if answer.headers.get("content-type", "").startswith("text/event-stream"):
                        self._send(answer.status_code, kept, None)
                        for chunk in answer.iter_raw():  # as it comes: a stream may last long
                            if method not in proxy.mute:
                                self.wfile.write(chunk)
                                self.wfile.flush()
                        return
                    content = answer.read()
                if method in CREATES:
                    proxy.creates += 1
                    hook, proxy.on_create = proxy.on_create, None
                    if hook is not None:
                        hook()
                self._send(answer.status_code, kept, content)

            def _send(self, status: int, headers: dict[str, str], content: bytes | None) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if content is not None:
                    self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                if content is not None:
                    self.wfile.write(content)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self._closed.set()
        self.server.shutdown()


def _method(body: bytes) -> str | None:
    try:
        message = json.loads(body)
    except ValueError:
        return None
    return message.get("method") if isinstance(message, dict) else None
