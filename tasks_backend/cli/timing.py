"""`--priority`, `--delay` and `--run-at` of `tasks-backend submit`, parsed into what `Client.submit` takes.

The server judges the time (by Redis's clock, against the operation's retention); here only the spelling is
checked, so a typo is a usage error before any request.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any

import click

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h)?")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_delay(text: str) -> float:
    """Seconds from `30s`, `500ms`, `2m`, `1h` or a bare number of seconds."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ValueError(text)
    return float(match[1]) * _UNIT_S[match[2] or "s"]


def parse_run_at(text: str) -> str:
    """A time with its offset (`2030-01-01T09:00:00Z`, `2030-01-01 09:00+02:00`), written as RFC 3339 (the
    only form the API takes)."""
    when = dt.datetime.fromisoformat(text.strip())
    if when.tzinfo is None:
        raise ValueError(text)
    return when.isoformat().replace("+00:00", "Z")


class _Parsed(click.ParamType[Any]):
    def __init__(self, name: str, parse: Callable[[str], Any], example: str) -> None:
        self.name, self.parse, self.example = name, parse, example

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return self.parse(str(value))
        except ValueError:
            self.fail(f"{value!r} is not a {self.name} (e.g. {self.example})", param, ctx)


def timing_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The three options, passed to the command as `priority`, `delay` and `run_at` (None when not given)."""
    for option in reversed((
            click.option("--priority", type=click.IntRange(0, 9), default=None,
                         help="0 to 9 (default 5): among your queued jobs, higher runs first"),
            click.option("--delay", type=_Parsed("duration", parse_delay, "30s, 500ms, 2m"), default=None,
                         help="start no sooner than this from now: 30s, 500ms, 2m, 1h"),
            click.option("--run-at", type=_Parsed("time", parse_run_at, "2030-01-01T09:00:00Z"), default=None,
                         help="start no sooner than this RFC 3339 time (with its offset)"))):
        command = option(command)
    return command
