"""The answer to a request refused by a limit before any protocol handled it.

On the JSON-RPC endpoints it is a JSON-RPC error (id null, the retry hint in `data`), since their clients read
nothing else; everywhere else a problem+json from the one error map. Both carry `Retry-After` (and the IETF
`RateLimit`/`RateLimit-Policy` fields when the request rate was the limit) with HTTP 429.
"""

from __future__ import annotations

import json

from tasks_backend.errors import RateLimited

from . import jsonrpc

#: WSGI environ key of a caller the fast path already authenticated and counted before handing on to Flask.
ADMITTED = "tasks_backend.admitted"
#: Paths whose callers speak JSON-RPC, and the error dialect of each.
JSONRPC_PATHS: dict[str, jsonrpc.Dialect] = {"/mcp": "mcp", "/a2a": "a2a"}


def jsonrpc_refusal(exc: RateLimited, path: str) -> tuple[int, bytes, list[tuple[str, str]]] | None:
    """Status, body and headers for a refused JSON-RPC request; None when `path` is not a JSON-RPC endpoint."""
    dialect = JSONRPC_PATHS.get(path)
    if dialect is None:
        return None
    body = json.dumps(jsonrpc.error_for(None, exc, dialect), separators=(",", ":")).encode()
    return 429, body, list(exc.headers)
