"""The worker's Redis and Sentinel broker transports: kombu's, with these changes.

- A lost connection raises the connection error it is, so that Celery reconnects (`_WorkerChannel._connparams`).
- One synchronous client per connection pool, not one per command (`_create_client`).
- A message that is not JSON is dropped with a warning (its job is still queued in the store, and swept).
- When the broker is the store's Redis, a job message's late-ack bookkeeping and its job's claim are one call
  (`FetchClaimQoS`), which also carries the acks made since: the pool process starts from that claim.

Rule: only the worker uses these, and only for `redis://` and `sentinel://` broker URLs; `rediss://` keeps
kombu's own (given a transport class, kombu would read the TLS settings from the URL's query alone).
"""
from __future__ import annotations

import contextlib
import json
import logging
import threading
from time import time
from typing import Any
from urllib.parse import urlsplit

import redis
from celery.worker import state as worker_state
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.transport.virtual import Empty
from kombu.utils.json import dumps

from tasks_backend.config import Settings
from tasks_backend.running.dispatch import RUN_TASK
from tasks_backend.running.execution import worker_name
from tasks_backend.store.claims import ClaimTerms, FetchClaim
from tasks_backend.store.keys import Keys

log = logging.getLogger(__name__)


#: The transport option that turns the claim with the fetch on (`fetch_claim_options`), and the header that carries
#: a claim's reply from the worker's main process to the pool process that runs the job: (job id, reply).
FETCH_CLAIM = "tasks_backend_claim"


def fetch_claim_options(settings: Settings) -> dict[str, Any]:
    """The broker transport options that make a worker claim each job as it fetches its message: only where the
    broker is the store's own Redis and database (one script touches both) and the transport is ours."""
    if settings.effective_broker_url != settings.redis_url or worker_transport(settings.redis_url) != TRANSPORT:
        return {}
    return {FETCH_CLAIM: {"prefix": settings.key_prefix, "lease_ms": int(settings.lease_s * 1000),
                          "max_attempts": settings.max_attempts}}


#: A claimed message's ack waits to ride with the next claim; alone, it goes once this many wait or after this long.
ACK_BATCH = 64
ACK_FLUSH_S = 0.05


class FetchClaimQoS(kombu_redis.QoS):  # type: ignore[misc]
    """kombu's late-ack bookkeeping for a message as it arrives, with the job's claim in the same call when the
    message is a job's run due now (a message held for a later time is claimed by its run, when it starts). A
    message that arrives once the worker is stopping (a fetch under way when the stop came) is not claimed: it
    goes back to the queue unrun, and its job must stay claimable at once, not after a lease.

    A claimed message's ack is taken off Redis with the next claim (or within `ACK_FLUSH_S`): one round trip per
    job instead of two. Until then a lost worker's message is restored and delivered again, and its claim finds
    the job finished, as it would after a worker lost between the job's outcome and kombu's ack."""

    channel: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._claimed: set[str] = set()
        self._acked: list[str] = []
        self._acked_lock = threading.Lock()  # the threads pool acks from its threads

    def append(self, message: Any, delivery_tag: str) -> None:
        claim = self.channel.fetch_claim()
        headers = message.headers
        job_id = headers.get("id")
        stopping = worker_state.should_stop is not None or worker_state.should_terminate is not None
        if claim is None or stopping or headers.get("task") != RUN_TASK or headers.get("eta") or not job_id:
            return super().append(message, delivery_tag)  # type: ignore[no-any-return]
        delivery = message.delivery_info
        kept = dumps([message._raw, delivery["exchange"], delivery["routing_key"]])
        acked = self._take_acked()
        try:
            with self.channel.conn_or_acquire() as client:
                reply = claim(client, job_id, (self.unacked_index_key, self.unacked_key), delivery_tag, time(), kept,
                              acked)
        except BaseException:
            self._give_back(acked)
            raise
        virtual.QoS.append(self, message, delivery_tag)
        self._claimed.add(delivery_tag)
        # The kept copy (what kombu restores) has no claim: a message delivered again is claimed again.
        message.headers = {**headers, FETCH_CLAIM: (job_id, reply)}
        return None

    def ack(self, delivery_tag: str) -> None:
        if delivery_tag not in self._claimed:
            return super().ack(delivery_tag)  # type: ignore[no-any-return]
        self._claimed.discard(delivery_tag)
        virtual.QoS.ack(self, delivery_tag)
        with self._acked_lock:
            self._acked.append(delivery_tag)
            full = len(self._acked) >= ACK_BATCH
        if full:
            self.flush_acks()
        return None

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        self._claimed.discard(delivery_tag)
        super().reject(delivery_tag, requeue=requeue)

    def flush_acks(self) -> None:
        """Take the acks still waiting off Redis now (kept for the next try if Redis cannot be reached)."""
        acked = self._take_acked()
        if not acked:
            return
        try:
            with self.pipe_or_acquire() as pipe:
                pipe.zrem(self.unacked_index_key, *acked).hdel(self.unacked_key, *acked).execute()
        except BaseException:
            self._give_back(acked)
            raise

    def restore_unacked_once(self, stderr: Any = None) -> Any:
        with contextlib.suppress(*self.channel.connection_errors):
            self.flush_acks()
        self._claimed.clear()
        return super().restore_unacked_once(stderr)

    def _take_acked(self) -> list[str]:
        with self._acked_lock:
            acked, self._acked = self._acked, []
        return acked

    def _give_back(self, acked: list[str]) -> None:
        with self._acked_lock:
            self._acked[:0] = acked


class _WorkerChannel:
    connection: Any
    pool: Any
    _sync_client: Any = None
    tasks_backend_claim: dict[str, Any] | None = None
    _fetch_claim: FetchClaim | None = None

    def fetch_claim(self) -> FetchClaim | None:
        """The claim this channel makes with each job message it fetches, or None (see `fetch_claim_options`)."""
        if self._fetch_claim is None and self.tasks_backend_claim:
            opts = self.tasks_backend_claim
            self._fetch_claim = FetchClaim(Keys(opts["prefix"]), ClaimTerms(
                int(opts["lease_ms"]), worker_name(), int(opts["max_attempts"])))
        return self._fetch_claim

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
    QoS = FetchClaimQoS
    from_transport_options = (*kombu_redis.Channel.from_transport_options, "tasks_backend_claim")


class Transport(kombu_redis.Transport):  # type: ignore[misc]
    Channel = Channel

    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        super().register_with_event_loop(connection, loop)
        cycle: Any = self.cycle
        if (earlier := getattr(cycle, "_tasks_backend_acks_tref", None)) is not None:
            earlier.cancel()  # registered again after a reconnection
        cycle._tasks_backend_acks_tref = loop.call_repeatedly(ACK_FLUSH_S, _flush_acks, cycle)


def _flush_acks(cycle: Any) -> None:
    for channel in list(cycle._channels):
        qos = channel._qos
        if isinstance(qos, FetchClaimQoS):
            try:
                qos.flush_acks()
            except (*channel.connection_errors, redis.ResponseError):
                log.debug("acks kept for the next flush: the broker cannot take them now", exc_info=True)


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
