"""The worker entry point: a worker that gives up says so in its exit status."""

from __future__ import annotations

import subprocess
import sys

from tasks_backend.devtools.embedded import free_port
from tests.support.procs import ROOT

GIVE_UP = """
import sys
from tasks_backend.config import Settings
from workers.main import start_worker
settings = Settings.from_env(redis_url=sys.argv[1], celery_overrides={"broker_connection_max_retries": 1})
sys.exit(start_worker(["--pool", "solo", "--without-mingle", "--without-gossip"], settings))
"""


def test_a_worker_that_cannot_reach_the_broker_gives_up_with_a_failure_status() -> None:
    """Exit 0 would read as "stopped on purpose" to a supervisor that restarts on failure only."""
    nobody = f"redis://127.0.0.1:{free_port()}/0"
    done = subprocess.run([sys.executable, "-c", GIVE_UP, nobody], cwd=ROOT, capture_output=True, text=True,
                          timeout=90)
    assert "Unrecoverable error" in done.stderr, done.stderr[-3000:]
    assert done.returncode == 1
