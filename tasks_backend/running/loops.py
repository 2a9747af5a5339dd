"""`repeat`: the shape every background loop of a worker or the sweeper shares.

Rule: a pass that meets an outage (Redis or the broker unreachable) is logged as a warning and tried again at the
next turn; any other failure is logged with its traceback; neither ends the loop, only `stop` does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..errors import ServiceUnavailable

log = logging.getLogger(__name__)


def repeat(stop: threading.Event, one_pass: Callable[[], float | None], *, every_s: float, name: str,
           logger: logging.Logger = log) -> None:
    """Run `one_pass` until `stop` is set, waiting between passes what it answers (None: `every_s`)."""
    while not stop.is_set():
        wait = every_s
        try:
            answered = one_pass()
            if answered is not None:
                wait = answered
        except ServiceUnavailable as exc:
            logger.warning("%s skipped: Redis or the broker is unreachable (%r)", name, exc.__cause__)
        except Exception:
            logger.exception("%s failed", name)
        stop.wait(wait)
