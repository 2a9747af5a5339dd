"""The domain model's helpers that every submit calls."""

from __future__ import annotations

import uuid

from tasks_backend.model.domain import new_uuid, rfc3339
from tasks_backend.service.cursors import valid_id


def test_new_uuids_are_random_version_4_uuids_in_their_canonical_text() -> None:
    made = [new_uuid() for _ in range(2000)]
    assert len(set(made)) == len(made)
    for text in made:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
        assert str(parsed) == text and valid_id(text)
    # Every bit but the six fixed ones is drawn: each of the 122 is seen both ways across 2,000 ids.
    ones = [0] * 128
    for text in made:
        bits = uuid.UUID(text).int
        for i in range(128):
            ones[i] += bits >> i & 1
    fixed = {i for i in range(128) if ones[i] in (0, len(made))}
    assert len(fixed) == 6


def test_rfc3339_is_utc_to_the_millisecond() -> None:
    assert rfc3339(0) == "1970-01-01T00:00:00.000Z"
    assert rfc3339(1_765_119_600_123) == "2025-12-07T15:00:00.123Z"
