"""Where each protocol carries a caller's W3C trace context, read at the entrance (only when tracing is on).

HTTP: the `traceparent` and `tracestate` headers. MCP: `params._meta.traceparent` / `params._meta.tracestate`
(the keys the MCP community and OpenTelemetry's MCP conventions use). A2A: `params.message.metadata.traceparent`
/ `.tracestate` (or `params.metadata`). A context in the body wins over the headers': it is the caller's own,
the headers may be a proxy's.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping
from typing import Any

_KEYS = ("traceparent", "tracestate")
_ID_SEGMENT = re.compile(r"/[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(?=/|$)")


def span_name(method: str, path: str) -> str:
    """`GET /v1/jobs/{id}`: a job's id in a path is not part of the name (one name per route)."""
    return f"{method} {_ID_SEGMENT.sub('/{id}', path)}"


def carrier(environ: dict[str, Any], protocol: str | None, max_body: int) -> dict[str, str]:
    """The trace context the request carries (empty: none). `protocol`: the adapter of a JSON-RPC path
    ("mcp", "a2a"), whose body is read here (within `max_body`, after the entrance's checks) and put back."""
    found = {key: str(environ[f"HTTP_{key.upper()}"]) for key in _KEYS if environ.get(f"HTTP_{key.upper()}")}
    if protocol in ("mcp", "a2a") and environ.get("REQUEST_METHOD") == "POST":
        meta = _body_meta(environ, protocol, max_body)
        if isinstance(meta, Mapping) and isinstance(meta.get("traceparent"), str):
            found = {key: meta[key] for key in _KEYS if isinstance(meta.get(key), str)}
    return found


def _body_meta(environ: dict[str, Any], protocol: str, max_body: int) -> Any:
    declared = environ.get("CONTENT_LENGTH") or ""
    if not declared.isdigit() or not 0 < int(declared) <= max_body:
        return None
    raw = environ["wsgi.input"].read(int(declared))
    environ["wsgi.input"] = io.BytesIO(raw)
    environ["CONTENT_LENGTH"] = str(len(raw))
    try:
        params = json.loads(raw).get("params")
    except (ValueError, AttributeError):  # not JSON, or a batch: the adapter answers it; no context here
        return None
    if not isinstance(params, Mapping):
        return None
    if protocol == "mcp":
        return params.get("_meta")
    message = params.get("message")
    metadata = message.get("metadata") if isinstance(message, Mapping) else None
    return metadata if isinstance(metadata, Mapping) and "traceparent" in metadata else params.get("metadata")
