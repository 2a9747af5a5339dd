"""The MCP client's older revision, against this project's own 2025-11-25 server over real HTTP with the session's
worker (the client is told the server offers no 2026 tasks): a tool runs as a 2025 task (`params.task`), is read
with `tasks/get` and `tasks/result`, fails as a task, and is cancelled with `tasks/cancel`."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tasks_backend.config import Settings
from tasks_backend.remote.client import Remotes
from tests.conftest import wait_until
from tests.support.remote_peers import Proxy


@pytest.fixture
def legacy(settings: Settings, live_url: str, worker: Any) -> Remotes:
    remotes = Remotes(settings.with_(push_allow_private=True, remote_credentials=((live_url, "Bearer alice-token"),)))
    remotes.mcp._modern = lambda url: False  # type: ignore[method-assign]
    return remotes


def _until_ended(remotes: Remotes, ref: dict[str, Any]) -> Any:
    return wait_until(lambda: (s := remotes.get(ref)).terminal and s, 20, interval=0.1, message="the task to end")


def test_a_2025_task_is_created_read_and_its_result_fetched(legacy: Remotes, live_url: str) -> None:
    ref = legacy.mcp.create(live_url + "/mcp", "demo.sleep", {"seconds": 0.2, "steps": 1}, "key-2025-a")
    assert ref["protocol"] == "mcp-2025" and ref["taskId"]
    status = _until_ended(legacy, ref)
    assert (status.state, status.result) == ("completed", {"slept": 0.2})
    # The same key makes the same task (this server honours the idempotency key in `_meta`).
    assert legacy.mcp.create(live_url + "/mcp", "demo.sleep", {"seconds": 0.2, "steps": 1}, "key-2025-a") == ref


def test_a_failed_2025_task_and_a_cancelled_one(legacy: Remotes, live_url: str) -> None:
    failed = legacy.mcp.create(live_url + "/mcp", "demo.fail", {"message": "no stock"}, "key-2025-b")
    status = _until_ended(legacy, failed)
    assert status.state == "failed" and "no stock" in str(status.message)
    slow = legacy.mcp.create(live_url + "/mcp", "demo.sleep", {"seconds": 60, "steps": 60}, "key-2025-c")
    legacy.cancel(slow)
    assert _until_ended(legacy, slow).state == "cancelled"


def test_looks_on_several_threads_open_one_2025_session(settings: Settings, live_url: str, worker: Any) -> None:
    """The poller looks at tasks on several threads: those that need a session with the same server at once share
    the one the first opens (the others wait for it), not one each."""
    proxy = Proxy(live_url)
    legacy = Remotes(settings.with_(push_allow_private=True,
                                    remote_credentials=((proxy.url, "Bearer alice-token"),)))
    legacy.mcp._modern = lambda url: False  # type: ignore[method-assign]
    try:
        url = proxy.url + "/mcp"
        ref = legacy.mcp.create(url, "demo.sleep", {"seconds": 30, "steps": 30}, "key-2025-threads")
        legacy.mcp._sessions.clear()  # as a new process finds it: no session yet
        before = proxy.calls.get("initialize", 0)

        def look_all_at_once() -> None:
            start = threading.Barrier(8)

            def look() -> None:
                start.wait()
                assert legacy.get(ref, questions=False).state == "working"

            threads = [threading.Thread(target=look) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)

        look_all_at_once()
        assert proxy.calls.get("initialize", 0) - before == 1
        look_all_at_once()  # and later looks keep it
        assert proxy.calls.get("initialize", 0) - before == 1
        legacy.cancel(ref)
    finally:
        proxy.close()
