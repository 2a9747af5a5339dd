"""The store behind Redis Sentinel: a client that follows the primary the Sentinels name across a failover.

The address is the form Celery and kombu take for a Sentinel broker: one `sentinel://` URL per Sentinel joined
by `;`, each with the database (`sentinel://[:password@]host:port/db;sentinel://host:port/db`). The service
name (`master_name`) comes from `TASKS_BACKEND_REDIS_SERVICE`, since kombu rejects unknown query options.
Rule: while no primary is known, commands fail with connection errors (answered as 503 + Retry-After), and a
primary demoted to a replica answers READONLY, which becomes a connection error and a fresh look-up: writes
never land on a replica.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from redis.sentinel import Sentinel, SentinelManagedConnection

from .redis_client import StoreClient

SCHEME = "sentinel"
#: The service name of Debian's `/etc/redis/sentinel.conf` and of Redis's own example configuration.
DEFAULT_SERVICE = "mymaster"
DEFAULT_PORT = 26379


def is_sentinel_url(url: str) -> bool:
    return url.startswith(f"{SCHEME}://")


def sentinel_url(sentinels: Sequence[str], db: int = 0) -> str:
    """The URL for `host:port` Sentinel addresses (`TASKS_BACKEND_REDIS_SENTINELS`)."""
    if not sentinels:
        raise ValueError("at least one Sentinel address (host:port) is needed")
    return ";".join(f"{SCHEME}://{address.strip()}/{db}" for address in sentinels)


def parse(url: str) -> tuple[list[tuple[str, int]], int, str | None, str | None]:
    """(Sentinel addresses, database, username, password) of a `sentinel://…;sentinel://…` URL. The
    credentials are the primary's; the database and credentials are read from the first part that has them."""
    addresses: list[tuple[str, int]] = []
    db: int | None = None
    username, password = None, None
    for part in url.split(";"):
        split = urlsplit(part.strip())
        if split.scheme != SCHEME or not split.hostname:
            raise ValueError(f"not a Sentinel address: {part!r} (expected sentinel://host:port/db)")
        addresses.append((split.hostname, split.port or DEFAULT_PORT))
        if db is None and split.path.strip("/"):
            db = int(split.path.strip("/"))
        username = username or (unquote(split.username) if split.username else None)
        password = password or (unquote(split.password) if split.password else None)
    return addresses, db or 0, username, password


@functools.cache
def _managed(connection_class: type[redis.Connection]) -> type[redis.Connection]:
    """`connection_class` (the store's kernel-timeout connection) that also asks the Sentinels where to connect."""
    if issubclass(connection_class, SentinelManagedConnection):
        return connection_class
    return type(f"Sentinel{connection_class.__name__}", (connection_class, SentinelManagedConnection), {})


def connect_primary(url: str, service: str | None, **options: Any) -> redis.Redis:
    """A client of the primary that `service` names at the Sentinels in `url`; `options` are the store's
    client options (timeouts, keepalive, retry), applied to the primary's connections."""
    addresses, db, username, password = parse(url)
    # Asking a Sentinel is a quick call on its own short timeouts: a stalled Sentinel is skipped, not waited on.
    timeout = min(options.get("socket_timeout") or options.get("io_timeout_s") or 2.0, 2.0)
    sentinel_kwargs = {"socket_timeout": timeout, "socket_connect_timeout": options.get("socket_connect_timeout", 1.0),
                       "socket_keepalive": True}
    primary = dict(options)
    primary["connection_class"] = _managed(primary.get("connection_class") or redis.Connection)
    if username:
        primary["username"] = username
    if password:
        primary["password"] = password
    sentinels = Sentinel(addresses, sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call]
    client: redis.Redis = sentinels.master_for(service or DEFAULT_SERVICE, redis_class=StoreClient, db=db,  # type: ignore[no-untyped-call]
                                               **primary)
    return client
