"""The operations the workers run, published in Redis, for applications that submit without the job code.

A submit checks the params, and an application that only submits and waits (`connect_service()`) may be
unable to import the job modules `TASKS_BACKEND_JOBS` names: they live with the workers. So every worker
publishes what a submit needs of each operation it runs (description, params' JSON Schema, TTL, poll
interval) in one hash (`Publisher`), and such an application checks submits against it (`PublishedOperations`).
Rule: each entry carries when it was last published, by Redis's clock; a publish drops entries no worker
published for `CATALOG_TTL_S` and gives the hash that TTL, so with no worker publishing nothing is left to
check against, and a submit says why.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidParams, StoreUnavailable, UnknownOperation
from ..model.validation import params_problems
from ..store.connect import redis_errors
from ..store.keys import Keys
from ..store.runner import ScriptRunner
from ..store.scripts import SCRIPTS
from .registry import Concurrency, Registry

log = logging.getLogger(__name__)

#: How long an entry outlives its last publish.
CATALOG_TTL_S = 24 * 3600.0
#: How often a worker publishes again, and how soon it tries again after a publish failed.
REFRESH_S = 300.0
RETRY_S = 5.0
#: How long an application uses what it read before reading the hash again.
CACHE_S = 5.0

def entries(registry: Registry) -> dict[str, str]:
    """What a submit needs of each operation of `registry`, as JSON (the shape `GET /v1/operations` uses)."""
    return {spec.name: json.dumps({"name": spec.name, "description": spec.description,
                                   "paramsSchema": registry.json_schema(spec.name), "ttlS": spec.ttl_s,
                                   "pollIntervalS": spec.poll_interval_s,
                                   **({"concurrency": {"max": spec.concurrency.max, "key": spec.concurrency.key}}
                                      if spec.concurrency else {})}, separators=(",", ":"), sort_keys=True)
            for spec in registry}


def publish(client: Any, keys: Keys, registry: Registry, ttl_s: float = CATALOG_TTL_S) -> int:
    """Publish `registry`'s operations; returns how many. Raises `StoreUnavailable` if Redis cannot be reached."""
    args: list[Any] = [int(ttl_s * 1000)]
    for name, entry in entries(registry).items():
        args += [name, entry]
    runner = ScriptRunner(client, {"catalog.publish": SCRIPTS["catalog.publish"]})
    return int(runner.call("catalog.publish", [keys.operations()], *args))


class Publisher:
    """A worker's: publishes its operations, then again every `refresh_s` until stopped."""

    def __init__(self, client: Any, keys: Keys, registry: Registry, refresh_s: float = REFRESH_S,
                 retry_s: float = RETRY_S) -> None:
        self.client, self.keys, self.registry = client, keys, registry
        self.refresh_s, self.retry_s = refresh_s, retry_s
        #: Whether the last publish succeeded (the next one comes after `refresh_s` if so, else `retry_s`).
        self.published = False

    def publish(self) -> bool:
        try:
            publish(self.client, self.keys, self.registry)
        except StoreUnavailable:
            if self.published:  # once per outage, not once per retry
                log.warning("operations not published: Redis is unreachable; trying again every %gs", self.retry_s)
            self.published = False
            return False
        self.published = True
        return True

    def run_forever(self, stop: threading.Event) -> None:
        """Publish again and again until `stop` is set (the first publish is the caller's, see `publish`)."""
        while not stop.wait(self.refresh_s if self.published else self.retry_s):
            self.publish()


@dataclass(frozen=True)
class PublishedOperation:
    """An operation as a worker published it: enough to check and submit it, without its code."""

    name: str
    description: str
    params_schema: dict[str, Any]
    ttl_s: float | None
    poll_interval_s: float | None
    #: Its `Concurrency` limit, if it has one.
    concurrency: Concurrency | None = None

    def load_params(self, raw: Any) -> dict[str, Any]:
        """Check params against the published JSON Schema. They are stored as given: the worker's own schema
        fills defaults and converts values when the job runs."""
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise InvalidParams("`params` must be a JSON object.")
        errors = params_problems(self.params_schema, raw)
        if errors:
            raise InvalidParams("The parameters do not match the operation's schema.", extra={"errors": errors})
        return dict(raw)

    def dump_params(self, params: dict[str, Any]) -> dict[str, Any]:
        return params


class PublishedOperations:
    """The operations the workers published, read from Redis (and reused for `cache_s`)."""

    def __init__(self, client: Any, keys: Keys, cache_s: float = CACHE_S) -> None:
        self.client, self.keys, self.cache_s = client, keys, cache_s
        self._read_at = self._missed_at = -float("inf")
        self._operations: dict[str, PublishedOperation] = {}

    def get(self, name: str) -> PublishedOperation:
        operations = self._read(fresh=False)
        # A worker may have published it since the last read; but unknown names (a typo, or any caller's
        # made-up ones) read the whole hash again at most once per `cache_s`, not once per submit.
        if isinstance(name, str) and name not in operations and time.monotonic() - self._missed_at > self.cache_s:
            self._missed_at = time.monotonic()
            operations = self._read(fresh=True)
        spec = operations.get(name) if isinstance(name, str) else None
        if spec is not None:
            return spec
        if not operations:
            raise UnknownOperation(
                f"No worker has published its operations to this Redis (key {self.keys.operations()!r}) within "
                f"{CATALOG_TTL_S / 3600:g} hours, and the job modules cannot be imported here: start a worker "
                "(`tasks-backend worker`) with the same REDIS_URL and TASKS_BACKEND_KEY_PREFIX.",
                extra={"operations": []})
        raise UnknownOperation(extra={"operations": sorted(operations)})

    def __iter__(self) -> Any:
        return iter(sorted(self._read(fresh=False).values(), key=lambda s: s.name))

    def _read(self, *, fresh: bool) -> dict[str, PublishedOperation]:
        if fresh or time.monotonic() - self._read_at > self.cache_s:
            with redis_errors():
                held = self.client.hgetall(self.keys.operations())
            read: dict[str, PublishedOperation] = {}
            for name, value in held.items():
                spec = _parse(name, value)
                if spec is not None:
                    read[name] = spec
            self._operations, self._read_at = read, time.monotonic()  # whole, for other threads reading it
        return self._operations


def _parse(name: str, value: str) -> PublishedOperation | None:
    try:
        entry = json.loads(value.partition(" ")[2])
        limit = entry.get("concurrency")
        return PublishedOperation(name, str(entry.get("description") or ""), dict(entry["paramsSchema"]),
                                  entry.get("ttlS"), entry.get("pollIntervalS"),
                                  Concurrency(int(limit["max"]), limit.get("key")) if limit else None)
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warning("operation %r: its published entry cannot be read; ignored", name)
        return None
