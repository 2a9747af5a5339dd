"""The control flow that parks a job: `_Parked` (it asks for input) and `_Suspend` (it waits for a time, its
children or a remote task). Raised by the job context, turned into the job's move by the executor."""

from __future__ import annotations

from typing import Any

from ..store.fields import Change


class _Parked(BaseException):
    def __init__(self, requests: dict[str, Any], message: str, wake_in_ms: int | None = None) -> None:
        self.requests = requests
        self.message = message
        #: The earliest deadline among the questions, from now (None: none has one).
        self.wake_in_ms = wake_in_ms


class _Suspend(BaseException):
    """Park the job in `suspended`: until `change.wake_ms`, or until `children` are all finished."""

    def __init__(self, change: Change, look_in_ms: int, children: list[str] | None = None) -> None:
        self.change, self.look_in_ms, self.children = change, look_in_ms, children or []
