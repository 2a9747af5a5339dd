"""How a worker process stops: its pool dies with it, and (when asked) its running jobs go back to the queue.

On SIGTERM (a warm shutdown) Celery stops taking messages and waits for the jobs in its pool: a deploy lets them
finish. A worker started with `hand_back` (the one `tasks-backend run` starts: a Ctrl-C should not wait for a
long job) signals every pool process (`HAND_BACK_SIGNAL`) instead, whose executor hands its job back at the
job's next cancellation point (`Executor._hand_back`): the job resumes from its last recorded step on the next
worker without waiting for its lease. A job that reaches no cancellation point within `HAND_BACK_WITHIN_S` is
handed back from beside it (fenced by its token), and its process is left to whoever stops the worker for good.
Rule: a pool process dies with the worker's main process however that ends (on Linux), so none runs on unseen.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Any

from celery import Celery, signals

from tasks_backend.serving.processes import die_with_parent

#: What the main process sends its pool processes when it stops. SIGUSR1 is billiard's soft time limit, and
#: SIGTERM its way of ending a pool process outright; SIGUSR2 is left to us.
HAND_BACK_SIGNAL = signal.SIGUSR2
#: How long a running job has, once the worker stops, to reach a cancellation point and hand itself back.
HAND_BACK_WITHIN_S = 2.5


def install(app: Celery, *, quiet: bool = False, hand_back: bool = False) -> None:
    """Wire the stop of a worker started for `app` (a process of its own, see `workers.main.start_worker`).
    `quiet`: Celery's "Warm shutdown" line is left out (the supervisor of `tasks-backend run` prints one);
    `hand_back`: a stop hands the running jobs back rather than waiting for them."""
    stopping: threading.Event = app.tasks_backend_stopping  # type: ignore[attr-defined]
    workers: list[Any] = []

    def watch() -> None:
        # Started before any stop, in each process that may run jobs: no thread is started in a signal handler.
        stopping.wait()
        time.sleep(HAND_BACK_WITHIN_S)
        executor = app.tasks_backend_executor()  # type: ignore[attr-defined]
        if executor is not None:
            executor.hand_back_overdue()

    def start_watch() -> None:
        if hand_back:
            threading.Thread(target=watch, name="hand-back-deadline", daemon=True).start()

    def init(sender: Any, **_: Any) -> None:
        if sender.app is app:
            workers.append(sender)
            start_watch()  # a solo or threads pool runs jobs in this process

    def ready(**_: Any) -> None:
        if quiet and workers:
            from celery.apps import worker

            worker.install_worker_term_handler(workers[0], verbose=False)  # type: ignore[attr-defined]

    def pool_process(**_: Any) -> None:
        die_with_parent(signal.SIGKILL)
        if hand_back:
            signal.signal(HAND_BACK_SIGNAL, lambda *_: stopping.set())
            start_watch()

    def shutting_down(**_: Any) -> None:
        # In the main process's signal handler: a solo or threads pool runs jobs here, a prefork pool in its
        # processes, each told by a signal.
        stopping.set()
        pool = getattr(workers[0], "pool", None) if workers else None
        info = getattr(pool, "info", None) or {}
        for pid in info.get("processes", ()) if isinstance(info, dict) else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, HAND_BACK_SIGNAL)

    # weak=False: the receivers are closures that nothing else holds.
    signals.worker_init.connect(init, weak=False)
    signals.worker_ready.connect(ready, weak=False)
    signals.worker_process_init.connect(pool_process, weak=False)
    if hand_back:
        signals.worker_shutting_down.connect(shutting_down, weak=False)
