"""Stopping a process's held streams (`tasks_backend.serving.drain`): a watch ends as its deadline would, at once.

The gevent side, a read interrupted mid-block in a stopping web worker, is in test_web_worker.py."""

from __future__ import annotations

import secrets
import time

import pytest

from tasks_backend.config import Settings
from tasks_backend.model.domain import JobState
from tasks_backend.service.runtime import build_runtime
from tasks_backend.serving.drain import Drain, Interrupted


def test_a_stopped_drain_refuses_every_later_read() -> None:
    drain = Drain()
    with drain.read():
        pass
    drain.stop()
    assert drain.stopping
    with pytest.raises(Interrupted), drain.read():
        pass


def test_watch_on_a_stopping_process_yields_the_job_as_it_stands_then_ends(settings: Settings) -> None:
    # Its own runtime (stopping is for good), on a queue no worker reads: the job stays queued.
    runtime = build_runtime(settings.with_(queue=f"drain-{secrets.token_hex(3)}"))
    record, _ = runtime.service.submit("alice", "test.noop")
    runtime.stop_streams()
    assert runtime.service.stopping and runtime.streaming().stopping  # one drain for both
    started = time.monotonic()
    seen = list(runtime.streaming().watch("alice", record.id, max_s=60, block_ms=10_000))
    assert [r.state for _, r in seen] == [JobState.QUEUED]
    assert time.monotonic() - started < 5  # not one 10 s blocking read
