"""`StorePart`: what each part of the job store (feeds, indexes, waits, the gate, ...) takes from `RedisStore`.

Rule: a part is a mixin of `RedisStore` and reaches Redis only through these; declared once here so that every part
sees the same names and types.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .keys import Keys
from .runner import ScriptRunner


class StorePart:
    redis: Any
    keys: Keys
    scripts: ScriptRunner
    max_ttl_ms: int
    _run: Callable[..., list[Any]]
    _eval: Callable[..., None]
    _schedule_in: Callable[[Any, str, Sequence[tuple[str, int]]], None]
