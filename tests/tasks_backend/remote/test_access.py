"""Which remotes a job may call and with which credentials, and what a remote that lost a task reads as: the
credentials come from settings only (longest URL prefix), a loopback URL is refused unless private addresses are
allowed, and a task the remote does not know (over real HTTP, this project as the remote) is a failed task."""

from __future__ import annotations

import json

import pytest

from tasks_backend.config import Settings
from tasks_backend.push.webhook import TargetRefused
from tasks_backend.remote.access import authorization
from tasks_backend.remote.client import Remotes
from tests.conftest import Serve, make_settings

CREDENTIALS = {"https://agents.example/": "Bearer general", "https://agents.example/billing/": "Bearer billing"}


def test_credentials_come_from_settings_by_the_longest_prefix() -> None:
    settings = Settings.from_env({"TASKS_BACKEND_REMOTE_CREDENTIALS": json.dumps(CREDENTIALS)})
    assert authorization(settings, "https://agents.example/billing/a2a") == "Bearer billing"
    assert authorization(settings, "https://agents.example/mcp") == "Bearer general"
    assert authorization(settings, "https://other.example/mcp") is None


@pytest.mark.parametrize("raw", ["not json", '["a"]', '{"https://a.example/": 5}'])
def test_malformed_credentials_are_refused_at_start(raw: str) -> None:
    with pytest.raises(ValueError, match="TASKS_BACKEND_REMOTE_CREDENTIALS"):
        Settings.from_env({"TASKS_BACKEND_REMOTE_CREDENTIALS": raw})


def test_a_loopback_remote_is_refused_unless_private_addresses_are_allowed() -> None:
    with pytest.raises(TargetRefused):
        Remotes(Settings()).guard("http://127.0.0.1:9/mcp")
    with pytest.raises(TargetRefused):
        Remotes(Settings()).guard("file:///etc/passwd")
    Remotes(Settings(push_allow_private=True)).guard("http://127.0.0.1:9/mcp")


@pytest.mark.parametrize("ref", [
    {"protocol": "mcp-2026", "path": "/mcp", "pollMs": 1000},
    {"protocol": "a2a", "path": "/a2a", "pollMs": 1000},
])
def test_a_task_the_remote_does_not_know_is_failed(redis_base: str, serve: Serve, ref: dict[str, object]) -> None:
    settings = make_settings(redis_base, push_allow_private=True)
    url = serve(settings) + str(ref.pop("path"))
    remotes = Remotes(settings.with_(remote_credentials=(("http://127.0.0.1:", "Bearer bob-token"),)))
    status = remotes.get({**ref, "url": url, "taskId": "5d0c2b57-5a5b-4a55-9d8e-000000000000"})
    assert status.state == "failed" and "no longer knows" in str(status.message)
