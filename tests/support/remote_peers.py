"""A forwarding proxy in front of a remote agent, to act when a job's create reaches the remote (a kill of the
worker that sent it, before its answer is back) and to count the creates that went through."""

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

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.creates = 0
        self.on_create: Callable[[], None] | None = None
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                answer = httpx.post(proxy.target + self.path, content=body, headers=headers, timeout=30)
                method = _method(body)
                if method in CREATES:
                    proxy.creates += 1
                    hook, proxy.on_create = proxy.on_create, None
                    if hook is not None:
                        hook()
                self.send_response(answer.status_code)
                for name in ("Content-Type", "Mcp-Session-Id"):
                    if name in answer.headers:
                        self.send_header(name, answer.headers[name])
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()


def _method(body: bytes) -> str | None:
    try:
        message = json.loads(body)
    except ValueError:
        return None
    return message.get("method") if isinstance(message, dict) else None
