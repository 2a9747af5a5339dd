"""The worker's Redis broker transports: kombu's, except that a lost broker stays a connection error.

When the broker goes away while the worker is waiting on a BRPOP (the usual state of a worker with a
free pool slot), Celery reacts to the connection error by collecting the connection and then closing
it (`Consumer.on_connection_error_after_connected`). With kombu's Redis transport that goes wrong:

1. `Connection.collect()` closes the channel; `Channel.close()` first reads the pending BRPOP reply,
   the read fails on the dead socket, and the close stops there, the channel not marked closed.
2. `collect()` then detaches the transport from the connection (`transport.client = None`).
3. Celery's `connection.close()` closes the same channel again; this time it gets as far as restoring
   unacknowledged messages, which builds a connection pool from `self.connection.client`, now None:
   `AttributeError: 'NoneType' object has no attribute 'hostname'`.

Celery only ignores connection errors there, so the AttributeError escapes the consumer, the worker
logs "Unrecoverable error" and shuts down instead of reconnecting (and its last ack, at shutdown,
fails the same way: "Error on stopping Hub"). Here a channel whose connection is gone raises the
connection error it is, which Celery ignores before it reconnects and carries on consuming.

It also keeps one synchronous client per connection pool. kombu builds a new `redis.Redis` for every
command it sends outside the BRPOP (the late ack's "unacked" bookkeeping when a message arrives, its
removal when the job is acknowledged), and building one costs about 45 us of CPU (redis-py fills a
table of about a hundred reply callbacks each time): two per job in the worker's main process, which
the pool processes wait on. The client holds no state of its own (each command takes a connection
from the pool), so one per pool does the same.

kombu's Sentinel transport builds its pools the same way (a primary killed in a failover is the same
lost connection), so `sentinel://` brokers get the same channel. Only the worker uses these transports,
and only for `redis://` and `sentinel://` broker URLs: with an explicit transport class kombu reads
TLS settings from the URL's query alone, so `rediss://` keeps kombu's own.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import redis
from kombu.transport import redis as kombu_redis


class _WorkerChannel:
    connection: Any
    pool: Any
    _sync_client: Any = None

    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection is None or self.connection.client is None:  # closed, or its transport let go
            raise redis.ConnectionError("the broker connection was closed after a connection error")
        return super()._connparams(asynchronous=asynchronous)  # type: ignore[misc]

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)  # type: ignore[misc]
        pool = self.pool  # a new pool after the channel reconnects: a new client with it
        client = self._sync_client
        if client is None or client.connection_pool is not pool:
            client = self._sync_client = super()._create_client()  # type: ignore[misc]
        return client


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
