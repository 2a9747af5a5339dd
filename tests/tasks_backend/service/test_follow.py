"""Following several jobs from one reader (`tasks_backend.service.follow`), against a real Redis (or Cluster) and
worker."""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

from tasks_backend.model.domain import JobState
from tasks_backend.service.follow import follow
from tasks_backend.service.runtime import Runtime
from tasks_backend.serving.drain import Drain, Interrupted, hung_up


def test_every_change_of_every_job_comes_through_one_reader(runtime: Runtime, worker: Any) -> None:
    service = runtime.streaming()
    jobs = [runtime.service.submit("alice", "demo.sleep", {"seconds": 0.6, "steps": 3})[0] for _ in range(3)]
    seen: dict[str, list[Any]] = {job.id: [] for job in jobs}
    for record in follow(service, jobs, max_s=60, block_ms=10_000):
        seen[record.id].append(record)
    for job in jobs:
        states = [r.state for r in seen[job.id]]
        assert states[0] is JobState.QUEUED and states[-1] is JobState.COMPLETED, states
        progress = [r.progress for r in seen[job.id] if r.progress is not None]
        assert progress == sorted(progress) and progress[-1] == 3, progress
        assert [r.updated_ms for r in seen[job.id]] == sorted(r.updated_ms for r in seen[job.id])


def test_a_finished_job_is_given_as_it_stands_and_not_followed(runtime: Runtime, worker: Any) -> None:
    done = runtime.service.submit("alice", "test.noop")[0]
    done = runtime.service.wait("alice", done.id, 30)
    assert done.terminal
    assert list(follow(runtime.streaming(), [done], max_s=60, block_ms=10_000)) == [done]


def test_a_read_asks_first_whether_the_client_is_gone() -> None:
    """Under threads nothing interrupts a read in progress: each read asks the connection first."""
    server, client = socket.socketpair()
    drain = Drain()
    try:
        drain.watch_with(threading.get_ident(), lambda: hung_up(server))
        assert not hung_up(server)
        with drain.read():
            pass
        client.close()
        assert hung_up(server)
        with pytest.raises(Interrupted), drain.read():
            pass
        drain.forget(threading.get_ident())
        with drain.read():  # the next request served by this thread reads again
            pass
    finally:
        server.close()
