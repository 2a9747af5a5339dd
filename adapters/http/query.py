"""Query fields every listing route reads the same way."""

from __future__ import annotations

from flask import request

from tasks_backend.errors import BadRequest

#: A page's size when the caller names none.
DEFAULT_LIMIT = 50


def page_limit() -> int:
    """The `limit` query field: a page's size (the service bounds it)."""
    try:
        return int(request.args.get("limit", str(DEFAULT_LIMIT)))
    except ValueError as exc:
        raise BadRequest("`limit` must be an integer.", extra={"errors": {"limit": ["must be an integer"]}}) from exc
