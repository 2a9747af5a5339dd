"""Receivers on loopback: for trying push delivery, one that records each POST (and can fail the first few) and
one that accepts connections and never answers; for traces, an OTLP/HTTP endpoint that keeps the spans it gets."""

from __future__ import annotations

import gzip
import json
import selectors
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Quiet(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def empty(self, status: int, content_type: str | None = None) -> None:
        """An answer with no body."""
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", "0")
        self.end_headers()


def _serve(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """A threaded server on a free loopback port, serving from a daemon thread."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class Receiver:
    """Records each POST: `calls` as (headers, body), `raw` as (headers, the body's bytes, for checking a
    signature) and `arrivals` as (monotonic time, body); the first `fail_first` attempts get a 500 and only
    their headers are kept (`refused`)."""

    def __init__(self, fail_first: int = 0, path: str = "/hook?src=test") -> None:
        self.calls: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.raw: list[tuple[dict[str, str], bytes]] = []
        self.refused: list[dict[str, str]] = []
        self.arrivals: list[tuple[float, dict[str, Any]]] = []
        self.attempts = 0
        self.fail_first = fail_first
        self.lock = threading.Lock()
        receiver = self

        class Handler(_Quiet):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    receiver.attempts += 1
                    failing = receiver.attempts <= receiver.fail_first
                    if failing:
                        receiver.refused.append(dict(self.headers.items()))
                    else:
                        decoded = json.loads(body)
                        receiver.calls.append((dict(self.headers.items()), decoded))
                        receiver.raw.append((dict(self.headers.items()), body))
                        receiver.arrivals.append((time.monotonic(), decoded))
                self.empty(500 if failing else 200)

        self.server = _serve(Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}{path}"

    def bodies(self) -> list[dict[str, Any]]:
        with self.lock:
            return [body for _, body in self.calls]

    def states(self) -> list[str]:
        return [b["statusUpdate"]["status"]["state"] for b in self.bodies() if "statusUpdate" in b]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class NeverAnswers:
    """Accepts every connection, reads what comes and never answers; closes a connection when its client gives
    up. Counts connections accepted and the most open at once."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=1024)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        self.accepted = self.open = self.most_open = 0
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.sock, selectors.EVENT_READ)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stopped.is_set():
            for key, _ in self._selector.select(0.1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self.sock:
                    conn, _ = self.sock.accept()
                    self.accepted += 1
                    self.open += 1
                    self.most_open = max(self.most_open, self.open)
                    self._selector.register(conn, selectors.EVENT_READ)
                    continue
                # Readable: the request (left unread in the buffer would keep it readable) or the client's close.
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    self._selector.unregister(sock)
                    sock.close()
                    self.open -= 1

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(5)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._selector.close()


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as an OTLP receiver got it: ids in hex ('' for no parent), attributes as Python values."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]
    service: str


class OtlpReceiver:
    """An OTLP/HTTP trace endpoint on loopback: accepts `POST /v1/traces` (protobuf, gzip or not) and keeps the
    spans it decodes (`decode=False`: only counts the requests, for benchmarks). `url` is what
    `OTEL_EXPORTER_OTLP_ENDPOINT` takes."""

    def __init__(self, decode: bool = True) -> None:
        self.requests = 0
        self.received: list[ReceivedSpan] = []
        self.lock = threading.Lock()
        receiver = self

        class OtlpHandler(_Quiet):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != "/v1/traces":
                    self.empty(404, "application/x-protobuf")
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                spans = _decode(body) if decode else []
                with receiver.lock:
                    receiver.requests += 1
                    receiver.received.extend(spans)
                self.empty(200, "application/x-protobuf")

        self.server = _serve(OtlpHandler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def spans(self) -> list[ReceivedSpan]:
        with self.lock:
            return list(self.received)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _decode(body: bytes) -> list[ReceivedSpan]:
    # Imported here: only a receiver that decodes needs it (it comes with the OTLP exporter).
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(ReceivedSpan(
                    span.name, span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(),
                    {a.key: _value(a.value) for a in span.attributes},
                    tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
                    str(resource.get("service.name", ""))))
    return spans


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None
