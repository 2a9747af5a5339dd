"""The quick fault-injection soak (`make soak QUICK=1`) as part of the suite: the system as deployed, in
separate processes, through every kind of fault; it must keep every promise it checks (exit status 0).

Deselect it for quick local runs with `-m "not soak"`; the suite runs seed 1 unless `SOAK_SEED=n` says otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.soak
@pytest.mark.timeout(360)
def test_quick_soak_keeps_every_promise(broker: str | None) -> None:
    """Once with the store's Redis as the broker, once with RabbitMQ (in the session's vhost)."""
    # One fixed schedule in the suite, so that a red run replays exactly; `make soak` draws a new one each time.
    seed = os.environ.get("SOAK_SEED", "1")
    argv = [sys.executable, "-m", "soak", "--quick", "--seed", seed, *(["--broker", broker] if broker else [])]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=330, check=False)
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-4000:]
