"""A remote that never answers delays only its own jobs' looks: eight jobs wait on a remote gone silent (each look
at it takes the whole 2 s remote timeout) while a ninth waits on this project as its own remote; the ninth
resumes within seconds of its remote task's end, not after the eight silent looks in turn. Real HTTP, a real
worker process (whose main process polls)."""

from __future__ import annotations

import time

from tasks_backend.model.domain import JobState
from tests.conftest import wait_until
from tests.support.remote_peers import Proxy
from tests.tasks_backend.remote.conftest import RemoteDeployment

TIMEOUT_S = 2


def test_a_silent_remote_does_not_hold_up_the_looks_at_other_remotes(deployment: RemoteDeployment) -> None:
    silent = Proxy(deployment.url)
    try:
        deployment.worker("w", concurrency=2, TASKS_BACKEND_REMOTE_TIMEOUT=str(TIMEOUT_S))
        stuck = [deployment.submit("test.remote_tool", {"url": silent.url + "/mcp", "tool": "test.sleeper",
                                                        "arguments": {"seconds": 300}}) for _ in range(8)]
        wait_until(lambda: all(deployment.state(j) is JobState.SUSPENDED for j in stuck), 40, interval=0.1,
                   message="the eight jobs to park")
        silent.stall.set()
        wait_until(lambda: silent.stalled.get("tasks/get", 0) >= 2, 20, interval=0.05,
                   message="looks at the silent remote to hang")

        job = deployment.submit("test.remote_tool", {"url": deployment.url + "/mcp", "tool": "test.slow_poll",
                                                     "arguments": {"seconds": 3}})
        # The eight remote sleepers run for minutes: the one remote job that ends is the ninth's.
        wait_until(lambda: any(r["status"] == "completed" for r in deployment.remote_jobs()), 30, interval=0.05,
                   message="the ninth job's remote task to end")
        ended = time.monotonic()
        done = deployment.finished(job, timeout=30)
        assert done["status"] == "completed" and done["result"] == {"remote": {"slept": 3.0}}
        # Looked at one by one, the eight silent looks alone take 8 x 2 s before the ninth's.
        assert time.monotonic() - ended < 3 * TIMEOUT_S
        assert all(deployment.state(j) is JobState.SUSPENDED for j in stuck)
    finally:
        silent.close()
