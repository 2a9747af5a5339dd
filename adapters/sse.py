"""Server-sent events: the one place that frames an event and answers with a stream, for every protocol.

Each protocol picks its own fields (HTTP names its events `handle`, MCP `message`, A2A sends bare
`data:`), but the framing rules live here: field order `id`, `retry`, `event`, `data`, a `data:`
line per line of the payload, and a blank line to end the event.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from flask import Response, current_app, request

from tasks_backend.serving.drain import ClientWatch

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


def response(events: Iterable[str]) -> Response:
    """A streamed answer: not cached, not buffered by a proxy in front, and whose reads end once its client has
    hung up (its Redis connection then goes back at once, not after a read's block of up to `STREAM_BLOCK_MS`)."""
    sock = request.environ.get("gunicorn.socket") or request.environ.get("werkzeug.socket")
    runtime = current_app.extensions.get("tasks_backend")
    if sock is not None and runtime is not None:
        events = ClientWatch(iter(events), sock, runtime.streaming().drain)
    answer = Response(events, mimetype="text/event-stream")
    answer.headers["Cache-Control"] = "no-cache"
    answer.headers["X-Accel-Buffering"] = "no"
    return answer
