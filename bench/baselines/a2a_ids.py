"""The ids of the tasks the a2a-sdk baseline holds from its start (read by the bench in the product's
environment, which cannot import the baseline's server)."""

from __future__ import annotations

import uuid

SEEDED = 1000
_NAMESPACE = uuid.UUID("6f1c3a52-2b7e-4c1a-9a55-0c3b1f0d9e21")


def seeded_ids() -> list[str]:
    """The ids of the completed tasks every baseline process holds from its start."""
    return [str(uuid.uuid5(_NAMESPACE, str(n))) for n in range(SEEDED)]
