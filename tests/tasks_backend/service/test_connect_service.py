"""`connect_service()`, the in-process API: a Redis it cannot reach is named, with the variable that sets it."""

from __future__ import annotations

import pytest

from tasks_backend import Principal, connect_service
from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import free_port
from tasks_backend.errors import StoreUnavailable


def test_an_unreachable_redis_is_named_with_its_setting() -> None:
    port = free_port()  # nothing listens there
    settings = Settings.from_env({"REDIS_URL": f"redis://:hunter2@127.0.0.1:{port}/0"})
    with pytest.raises(StoreUnavailable) as raised:
        connect_service(settings)
    message = str(raised.value)
    assert f"redis://:***@127.0.0.1:{port}/0" in message
    assert "REDIS_URL" in message
    assert "hunter2" not in message


def test_a_reachable_redis_gives_the_service(settings: Settings) -> None:
    service = connect_service(settings)
    jobs, _cursor = service.list(Principal("nobody-here"))
    assert list(jobs) == []
