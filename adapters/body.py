"""JSON request bodies, decoded once for every protocol, and refused before anything is done with them
when they could not be stored or answered: nested deeper than `MAX_DEPTH`, or holding a lone UTF-16
surrogate (`"\\ud800"`), which no UTF-8 encoder (Redis's client, the JSON answer) can write.

Both checks cost nothing on an ordinary body: the depth walk runs only when the body has more
brackets than the limit, the surrogate walk only when the raw bytes hold a `\\uD8..`-`\\uDF..`
escape or a byte that starts an encoded surrogate.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: Deeper than any operation's params need, far below the interpreter's recursion limit.
MAX_DEPTH = 64
_SURROGATE = re.compile(rb"\\u[dD][89abAB]|\\u[dD][c-fC-F]|\xed[\xa0-\xbf]")


class Unreadable(ValueError):
    """Not JSON, not UTF-8, or nested too deeply: the body cannot be read at all."""


class LoneSurrogate(ValueError):
    """Valid JSON holding a string no UTF-8 encoder can write; `value` is what was decoded."""

    def __init__(self, value: Any) -> None:
        super().__init__("The body holds a lone UTF-16 surrogate (\\ud800-\\udfff); send valid Unicode text.")
        self.value = value


def loads(raw: bytes) -> Any:
    """The JSON value in a body, or `Unreadable` / `LoneSurrogate`."""
    try:
        value = json.loads(raw)
    except RecursionError as exc:
        raise Unreadable(f"The body is nested more than {MAX_DEPTH} levels deep.") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise Unreadable("The body is not valid JSON.") from exc
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _depth(value) > MAX_DEPTH:
        raise Unreadable(f"The body is nested more than {MAX_DEPTH} levels deep.")
    if _SURROGATE.search(raw) and has_lone_surrogate(value):
        raise LoneSurrogate(value)
    return value


def _depth(value: Any) -> int:
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, level)
            if level > MAX_DEPTH:
                return level
            todo.extend((child, level + 1) for child in item)
    return deepest


def has_lone_surrogate(value: Any) -> bool:
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            if not _encodable(item):
                return True
        elif isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return False


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
