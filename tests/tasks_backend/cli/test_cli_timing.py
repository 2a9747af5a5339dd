"""The command line's own reading of times (`cli/timing.py`): lenient in what a person types, strict in what it
sends, so the API's RFC 3339 check never refuses a time the command line took."""

from __future__ import annotations

import pytest

from tasks_backend.cli.timing import parse_run_at
from tasks_backend.model.timing import RFC3339


@pytest.mark.parametrize(("typed", "sent"), [
    ("2030-01-01T09:00:00Z", "2030-01-01T09:00:00Z"),
    ("2030-01-01 09:00+02:00", "2030-01-01T09:00:00+02:00"),
    (" 2030-01-01T09:00:00.250+00:00 ", "2030-01-01T09:00:00.250000Z"),
])
def test_a_typed_time_is_sent_as_rfc_3339(typed: str, sent: str) -> None:
    assert parse_run_at(typed) == sent
    assert RFC3339.fullmatch(sent)


def test_a_time_without_its_offset_is_refused() -> None:
    with pytest.raises(ValueError):
        parse_run_at("2030-01-01T09:00:00")
