"""Running Lua scripts by SHA: the one runner every script of the product goes through.

Scripts are called with EVALSHA inside plain commands and pipelines (redis-py's `Script` objects would add a
`SCRIPT EXISTS` round trip to every pipeline); the scripts are loaded on first use, and once again after
NOSCRIPT (a Redis restarted or flushed its scripts). Redis being down surfaces as `StoreUnavailable`.
"""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import redis

from .connect import redis_errors

T = TypeVar("T")


def new_request_id() -> str:
    """An id for one request to a script (a replay carries the same one). It is only ever compared with
    the last request that changed the same job, so 48 random bits are plenty, and every finished job
    keeps one: short, for memory."""
    return base64.urlsafe_b64encode(os.urandom(6)).decode()


class ScriptRunner:
    """Runs named scripts on one client (a single Redis, or a Cluster whose pipelines allow EVALSHA).

    API, for any module with scripts of its own:

    - `ScriptRunner(client, scripts)`: `scripts` maps a name to the script's full text: `store.scripts.SCRIPTS`,
      or a module's own scripts each passed through `store.scripts.compose(source)` (which gives it the
      prelude: `clock()`, `ms()`, `replayed()` and the state names). Nothing is sent until the first call.
      A `RedisStore`'s runner is `store.scripts`, with every script of `store/scripts/` in it.
    - `call(name, keys, *args)`: one script as one command; returns its reply.
    - `run(build, in_order=False)`: one round trip: `build(pipe)` queues commands on a plain pipeline,
      scripts with `queue(pipe, name, keys, *args)`; returns the replies in order. `in_order`: each command
      takes effect after the ones before it (a Cluster pipeline is asked to, see `cluster.ScriptingPipeline`).
    - `retrying(call)`: any callable that sends `queue`d scripts, run with the loading and the one retry after
      NOSCRIPT; `call` and `run` are built on it. A round trip retried after NOSCRIPT is sent again whole, so
      every script in it must give the same outcome applied twice (a request id from `new_request_id`, passed
      in ARGV, lets a script that changes state answer a replay as it did the first time).

    Every method turns Redis being down into `StoreUnavailable`, unless `store_errors` is False (a worker's broker
    transport, whose Redis errors kombu and Celery handle as the broker errors they are).
    """

    def __init__(self, client: Any, scripts: Mapping[str, str], *, store_errors: bool = True) -> None:
        self.redis: Any = client
        self.scripts = dict(scripts)
        self._sha: dict[str, str] = {}
        self._errors = redis_errors if store_errors else contextlib.nullcontext

    def load(self) -> None:
        """Load every script (on a Cluster, on every primary)."""
        self._sha = {name: self.redis.script_load(body) for name, body in self.scripts.items()}

    def retrying(self, call: Callable[[], T]) -> T:
        with self._errors():
            for attempt in (1, 2):
                if not self._sha:
                    self.load()
                try:
                    return call()
                except redis.exceptions.NoScriptError:
                    if attempt == 2:
                        raise
                    self._sha = {}
        raise AssertionError("unreachable")

    def queue(self, pipe: Any, name: str, keys: Sequence[str], *args: Any) -> None:
        pipe.evalsha(self._sha[name], len(keys), *keys, *args)

    def call(self, name: str, keys: Sequence[str], *args: Any) -> Any:
        return self.retrying(lambda: self.redis.evalsha(self._sha[name], len(keys), *keys, *args))

    def run(self, build: Callable[[Any], None], *, in_order: bool = False) -> list[Any]:
        def call() -> list[Any]:
            pipe = self.redis.pipeline(transaction=False)
            build(pipe)
            ordered = getattr(pipe, "execute_in_order", None) if in_order else None
            return list(ordered() if ordered is not None else pipe.execute())

        return self.retrying(call)
