"""Process plumbing shared by every process the product starts: a child that dies with its parent."""

from __future__ import annotations

import ctypes
import signal
import sys


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """In the child, before exec (or after a fork): on Linux, ask for `sig` when the process that started us
    dies, so a killed `tasks-backend run` or test session leaves nothing behind. SIGTERM for a Redis (it saves
    its AOF on SIGTERM); SIGKILL for what must end whatever it is doing (a worker waiting on a job).
    Linux sends it when the starting *thread* ends: start the process from a thread that outlives it."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(sig))  # PR_SET_PDEATHSIG
