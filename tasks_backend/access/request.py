"""Who is asking, from where, in which request: what the web entrance learns of a request, for the layers
behind it that record what callers did (the audit trail) without being handed the request.

The entrance binds it once per request (`bind`), for every protocol alike; outside a request (a worker, the
command line, the in-process API) there is none and `current()` says so.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestContext:
    request_id: str
    #: The caller's address as the entrance found it (behind trusted proxies, the forwarded one).
    address: str


_current: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar("request_context", default=None)


def bind(request_id: str, address: str) -> contextvars.Token[RequestContext | None]:
    return _current.set(RequestContext(request_id, address))


def unbind(token: contextvars.Token[RequestContext | None]) -> None:
    _current.reset(token)


def current() -> RequestContext | None:
    return _current.get()
