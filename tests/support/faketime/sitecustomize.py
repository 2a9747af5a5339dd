"""Loaded (as `sitecustomize`) by worker processes that run under libfaketime with a skewed host clock.

libfaketime 0.9.10 (Debian's) breaks `time.sleep` on Python 3.11+ when the monotonic clock is left
unfaked: Python sleeps with `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`, which that release
rewrites into an invalid request (EINVAL; wolfcw/libfaketime#426). Sleeping on `select` instead keeps
the process working; every host-clock reading still comes from libfaketime.

SIGUSR2 writes every thread's stack to stderr (the process's log), so a test that finds a skewed process
stuck can say where.
"""

import faulthandler
import select
import signal
import time


def _sleep(seconds: float) -> None:
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        select.select([], [], [], left)


time.sleep = _sleep
faulthandler.register(signal.SIGUSR2, all_threads=True)
