"""The deployment the worker tests that kill processes share: worker and sweeper processes of each test's own, with
a short lease and grace so that a lost worker's job is taken up again within seconds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Serve, make_settings, show_logs_on_failure
from tests.support.deployment import Deployment
from tests.support.procs import tails


@pytest.fixture
def deployment(redis_base: str, tmp_path: Path, serve: Serve, request: pytest.FixtureRequest) -> Iterator[Deployment]:
    d = Deployment(make_settings(redis_base, lease_s=1.5, queued_grace_s=1.0, sweep_interval_s=0.2), tmp_path, serve)
    show_logs_on_failure(request, lambda: tails(d.procs))
    try:
        yield d
    finally:
        d.close()
