"""The local services the soak's jobs and push configs talk to: the deduplicating downstream, and the
A2A push receivers (healthy, slow, dead, malformed). All run in the harness, which is never faulted."""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TERMINAL_A2A = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED"}


class _Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"null")

    def _answer(self, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


class _Server:
    def __init__(self, handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1") -> None:
        self.host = host
        self.server = ThreadingHTTPServer((host, 0), handler)
        self.server.daemon_threads = True
        self.server.owner = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.server.serve_forever, name="soak-service", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.server.server_address[1]}/"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Downstream(_Server):
    """Applies each effect once per idempotency key, as a payment API would.

    An effect (job, step) seen under two different keys was applied twice: the key was not stable.
    `host` is the address it listens on (loopback, or a test network's bridge for workers in other namespaces)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.lock = threading.Lock()
        self.keys_by_effect: dict[tuple[str, str], set[str]] = defaultdict(set)
        self.repeats = 0  # the same key again: deduplicated, as designed (a replayed step)
        #: When the harness first received each effect (monotonic): the harness's clock, which no fault skews.
        self.first_at: dict[tuple[str, str], float] = {}

        class Handler(_Quiet):
            def do_POST(self) -> None:
                body = self._body()
                owner: Downstream = self.server.owner  # type: ignore[attr-defined]
                now = time.monotonic()
                with owner.lock:
                    effect = (str(body["job"]), str(body["step"]))
                    owner.first_at.setdefault(effect, now)
                    keys = owner.keys_by_effect[effect]
                    if body["key"] in keys:
                        owner.repeats += 1
                    keys.add(str(body["key"]))
                self._answer()

        super().__init__(Handler, host)

    def first(self, job: str, step: str) -> float | None:
        """When the effect `step` of `job` first arrived (monotonic), None if it never did."""
        with self.lock:
            return self.first_at.get((job, step))

    def applied_twice(self) -> dict[str, int]:
        """Per job, effects applied under more than one key."""
        out: dict[str, int] = defaultdict(int)
        with self.lock:
            for (job, _), keys in self.keys_by_effect.items():
                if len(keys) > 1:
                    out[job] += len(keys) - 1
        return dict(out)


class Receiver(_Server):
    """A push receiver that records each status update it accepts; `delay_s` makes it slow."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.lock = threading.Lock()
        self.updates: dict[str, list[tuple[str, str]]] = defaultdict(list)  # task -> [(state, timestamp)]
        delay = delay_s

        class Handler(_Quiet):
            def do_POST(self) -> None:
                body = self._body()
                if delay:
                    time.sleep(delay)
                update = body.get("statusUpdate") if isinstance(body, dict) else None
                if isinstance(update, dict):
                    status = update.get("status") or {}
                    owner: Receiver = self.server.owner  # type: ignore[attr-defined]
                    with owner.lock:
                        owner.updates[str(update.get("taskId"))].append(
                            (str(status.get("state")), str(status.get("timestamp"))))
                self._answer()

        super().__init__(Handler)

    def states(self, task_id: str) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.updates.get(task_id, ()))


class Malformed:
    """Answers every request with a line that is not an HTTP status line."""

    def __init__(self) -> None:
        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.settimeout(5)
                try:
                    self.request.recv(65536)
                    self.request.sendall(b"HELLO THERE\r\n\r\n")
                except OSError:
                    pass

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, name="soak-malformed", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def dead_url() -> str:
    """A loopback port nothing listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/"
