"""The worker's Redis and Sentinel broker transports: kombu's, with two changes.

- A channel whose connection is gone raises the connection error it is, so that Celery reconnects after
  losing the broker during a BRPOP instead of shutting the worker down (`_WorkerChannel._connparams`).
- One synchronous client per connection pool, instead of one built for every command (`_create_client`).
- A message that is not JSON is dropped with a warning instead of stopping the worker (`_brpop_read`, `_get`):
  the job it stood for, if any, is still queued in the store, whose sweeper publishes it again.

Rule: only the worker uses these, and only for `redis://` and `sentinel://` broker URLs; `rediss://` keeps
kombu's own (given a transport class, kombu would read the TLS settings from the URL's query alone).
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import urlsplit

import redis
from kombu.transport import redis as kombu_redis
from kombu.transport.virtual import Empty

log = logging.getLogger(__name__)


class _WorkerChannel:
    connection: Any
    pool: Any
    _sync_client: Any = None

    def _connparams(self, asynchronous: bool = False) -> Any:
        """Celery closes a lost connection's channel twice, and kombu's first close detaches the transport:
        the second would fail with an AttributeError, which Celery does not ignore (the worker would exit with
        "Unrecoverable error"). A connection error it ignores, and reconnects."""
        if self.connection is None or self.connection.client is None:  # closed, or its transport let go
            raise redis.ConnectionError("the broker connection was closed after a connection error")
        return super()._connparams(asynchronous=asynchronous)  # type: ignore[misc]

    def _brpop_read(self, **options: Any) -> bool:
        try:
            return bool(super()._brpop_read(**options))  # type: ignore[misc]
        except json.JSONDecodeError:
            _dropped()
            return True  # something was read: the poller goes on to its next BRPOP

    def _get(self, queue: str) -> Any:
        try:
            return super()._get(queue)  # type: ignore[misc]
        except json.JSONDecodeError:
            _dropped()
            raise Empty() from None

    def _create_client(self, asynchronous: bool = False) -> Any:
        """kombu builds a `redis.Redis` per command outside the BRPOP (two per job: the late ack's
        bookkeeping), about 45 us of CPU each; the client holds no state of its own, so one per pool."""
        if asynchronous:
            return super()._create_client(asynchronous=True)  # type: ignore[misc]
        pool = self.pool  # a new pool after the channel reconnects: a new client with it
        client = self._sync_client
        if client is None or client.connection_pool is not pool:
            client = self._sync_client = super()._create_client()  # type: ignore[misc]
        return client


def _dropped() -> None:
    log.warning("a broker message that is not JSON was dropped (its job, if any, is published again by the sweeper)")


class Channel(_WorkerChannel, kombu_redis.Channel):  # type: ignore[misc]
    pass


class Transport(kombu_redis.Transport):  # type: ignore[misc]
    Channel = Channel


class SentinelChannel(_WorkerChannel, kombu_redis.SentinelChannel):  # type: ignore[misc]
    pass


class SentinelTransport(kombu_redis.SentinelTransport):  # type: ignore[misc]
    Channel = SentinelChannel


TRANSPORT = f"{__name__}:Transport"
SENTINEL_TRANSPORT = f"{__name__}:SentinelTransport"
_TRANSPORTS = {"redis": TRANSPORT, "sentinel": SENTINEL_TRANSPORT}


def worker_transport(broker_url: str) -> str | None:
    """The `broker_transport` setting for a worker: ours for plain Redis and Sentinel, kombu's choice otherwise."""
    return _TRANSPORTS.get(urlsplit(broker_url).scheme)
