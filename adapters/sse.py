"""Server-sent events: the one place that frames an event and answers with a stream, for every protocol.

Each protocol picks its own fields (HTTP names its events `handle`, MCP `message`, A2A sends bare
`data:`), but the framing rules live here: field order `id`, `retry`, `event`, `data`, a `data:`
line per line of the payload, and a blank line to end the event.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from typing import Any

from flask import Response, current_app, request

from tasks_backend.serving.drain import ClientWatch, HangUpWatch

#: Compact JSON separators, for protocols whose streams are read by machines only.
COMPACT = (",", ":")


def frame(data: str | None = None, *, event: str | None = None, event_id: str | None = None,
          retry_ms: int | None = None) -> str:
    """One event. `data=None` leaves the data field out; `data=""` sends an empty one (a priming event)."""
    lines: list[str] = []
    if event_id:
        lines.append(f"id: {event_id}")
    if retry_ms is not None:
        lines.append(f"retry: {retry_ms}")
    if event:
        lines.append(f"event: {event}")
    if data is not None:
        # A newline inside the payload would end the field early; each line gets its own `data:`.
        lines.extend(f"data: {line}" for line in data.split("\n"))
    return "\n".join(lines) + "\n\n"


def json_frame(value: Any, *, event: str | None = None, event_id: str | None = None,
               retry_ms: int | None = None, separators: tuple[str, str] | None = None) -> str:
    """One event whose data is `value` as JSON."""
    return frame(json.dumps(value, separators=separators), event=event, event_id=event_id, retry_ms=retry_ms)


def _client() -> tuple[Any, Any] | None:
    """(The request's client socket, the process's drain), where the server hands out the socket."""
    sock = request.environ.get("gunicorn.socket") or request.environ.get("werkzeug.socket")
    runtime = current_app.extensions.get("tasks_backend")
    return (sock, runtime.streaming().drain) if sock is not None and runtime is not None else None


def hang_up_watch() -> contextlib.AbstractContextManager[HangUpWatch | None]:
    """Around a held answer that is not a stream (a blocking wait): its reads end once its client has hung up,
    as a stream's do (`watch.hung_up` then says so); None where the server gives no socket to watch."""
    client = _client()
    return HangUpWatch(*client) if client is not None else contextlib.nullcontext()


def response(events: Iterable[str]) -> Response:
    """A streamed answer: not cached, not buffered by a proxy in front, and whose reads end once its client has
    hung up (its Redis connection then goes back at once, not after a read's block of up to `STREAM_BLOCK_MS`)."""
    client = _client()
    if client is not None:
        events = ClientWatch(iter(events), *client)
    answer = Response(events, mimetype="text/event-stream")
    answer.headers["Cache-Control"] = "no-cache"
    answer.headers["X-Accel-Buffering"] = "no"
    return answer
