"""The quick fault-injection soak (`make soak QUICK=1`) as part of the suite: the system as deployed, in
separate processes, through every kind of fault; it must keep every promise it checks (exit status 0).

Deselect it for quick local runs with `-m "not soak"`; pin its schedule with `SOAK_SEED=n`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.soak
@pytest.mark.timeout(360)
# Today the soak finds lost, duplicated and stuck work and missed pushes (docs/reliability.md); strict, so the
# suite fails once the fixes of issue 11 make it pass, and this mark is removed then.
@pytest.mark.xfail(strict=True, reason="issue 11: the quick soak fails on today's code")
def test_quick_soak_keeps_every_promise() -> None:
    seed = os.environ.get("SOAK_SEED")
    argv = [sys.executable, "-m", "soak", "--quick", *(["--seed", seed] if seed else [])]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=330, check=False)
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-4000:]
