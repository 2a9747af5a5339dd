"""`BackgroundStep`: a Celery bootstep that runs one loop on a thread of the worker's main process.

Rule: the loop is `run_forever(stop_event)`; it starts with the worker and is told to stop (and joined, for a
bounded time, as a daemon thread that cannot hold the process up) when the worker stops.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from celery import bootsteps


class BackgroundStep(bootsteps.StartStopStep):
    """Subclasses start their loop with `run_in_background`; `stop` sets the event and joins the thread."""

    #: How long stopping the worker waits for the loop to notice the event.
    join_timeout_s = 5.0

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None

    def run_in_background(self, run_forever: Callable[[threading.Event], object], name: str) -> None:
        self.thread = threading.Thread(target=run_forever, args=(self.stop_event,), name=name, daemon=True)
        self.thread.start()

    def stop(self, parent: Any) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout=self.join_timeout_s)
