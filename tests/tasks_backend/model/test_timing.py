"""The checks of a submit's timing as the in-process API hands it over (the wire's are in
tests/adapters/test_timing_input.py), and RFC 3339 times the parser must read."""

from __future__ import annotations

from typing import Any

import pytest

from tasks_backend.errors import InvalidParams
from tasks_backend.model.timing import Timing, parse_run_at


@pytest.mark.parametrize("run_at", [1_796_606_863_144.5, "1796606863144", True])
def test_a_start_time_that_is_not_whole_milliseconds_is_refused_naming_run_at(run_at: Any) -> None:
    with pytest.raises(InvalidParams) as refused:
        Timing(run_at_ms=run_at).check(600_000, 1_796_606_800_000)
    assert refused.value.extra["errors"].keys() == {"runAt"}


def test_a_leap_second_reads_as_the_second_after_the_59th() -> None:
    assert parse_run_at("2016-12-31T23:59:60Z") == parse_run_at("2017-01-01T00:00:00Z")
    assert parse_run_at("2016-12-31T23:59:60.5+00:00") == parse_run_at("2017-01-01T00:00:00.5Z")


def test_a_timing_is_told_by_what_it_does() -> None:
    assert Timing().identity() == Timing(delay_ms=0, priority=5).identity()
    assert Timing(priority=9).identity() != Timing(priority=8).identity()
    assert Timing(delay_ms=10).identity() != Timing(run_at_ms=10).identity()
