"""Connecting to Redis: one server, a Sentinel-named primary or a Cluster, with clients that fail fast.

Redis errors are translated here into `StoreUnavailable` (`redis_errors`); nothing above the store sees a
redis-py exception. `through_outage` retries a write across a short outage.
"""

from __future__ import annotations

import functools
import select
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode
from redis.retry import Retry

from ..config import CLUSTER_SCHEMES, is_cluster_url
from ..errors import StoreUnavailable
from . import sentinel as failover
from .cluster import ScriptingCluster
from .redis_client import StoreClient

T = TypeVar("T")

try:  # a hiredis without a packer of its own (or none): redis-py packs every command as it would anyway
    from hiredis import pack_command
except ImportError:
    pack_command = None  # type: ignore[assignment]

# A Redis Cluster that lost a node without a replica to promote, or is moving a slot, says so with errors of its
# own, and so does redis-py once its refresh of a cluster's topology reached no node (redis-py 8 on): the same
# "try again later" to callers.
REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.BusyLoadingError,
              redis.exceptions.ClusterDownError, redis.exceptions.TryAgainError, redis.exceptions.SlotNotCoveredError,
              *filter(None, [getattr(redis.exceptions, "RedisClusterUnreachableError", None)]))


def keepalive_options() -> dict[int, int]:
    """TCP options that drop a connection to a Redis that died or became unreachable within seconds."""
    wanted = {"TCP_KEEPIDLE": 10, "TCP_KEEPINTVL": 5, "TCP_KEEPCNT": 3, "TCP_USER_TIMEOUT": 30_000}
    return {getattr(socket, name): value for name, value in wanted.items() if hasattr(socket, name)}


class NativePacker:
    """Packs a command with hiredis alone, for connections that encode as UTF-8, strictly (the default).

    redis-py's own packer checks and encodes every argument in Python before hiredis packs them: about half a
    microsecond an argument, some 20 us for a submit's script call of 45. hiredis takes str, bytes, int and float
    as they are and writes the same bytes. A command name of two words, and any other argument (a bytearray; a
    bool, which redis-py refuses), go through redis-py's packer, which splits, converts or refuses them as ever."""

    def __init__(self, standard: Any) -> None:
        self.standard = standard

    def pack(self, *args: Any) -> list[bytes]:
        head = args[0]
        if isinstance(head, str) and " " not in head:
            try:
                return [pack_command(args)]
            except TypeError:
                pass
        return self.standard.pack(*args)  # type: ignore[no-any-return]


#: `select.select` takes descriptors below this; a connection with a higher one is checked as redis-py checks it.
FD_SETSIZE = 1024


class NativePackingConnection(redis.Connection):
    """A TCP connection that packs its commands with `NativePacker` (the store's, on one server or a Cluster), and
    answers the pool's check of every connection it hands out with one system call."""

    def _construct_command_packer(self, packer: Any) -> Any:
        standard = super()._construct_command_packer(packer)  # type: ignore[no-untyped-call]
        if packer is not None or pack_command is None or (self.encoder.encoding, self.encoder.encoding_errors) != (
                "utf-8", "strict"):
            return standard
        return NativePacker(standard)

    def can_read(self, timeout: float = 0) -> bool:
        """Whether a reply is buffered or the socket is readable (data left over, or a server that closed it): the
        pool reconnects such a connection before handing it out.

        The pool asks with no timeout on every command. redis-py answers through `select.poll`, which under the
        web's gevent is gevent's own: watchers made and a turn of the event loop, some 24 us a command. A select
        that does not wait is one system call, and never blocks: under gevent its unpatched one."""
        sock, reader = self._sock, getattr(self._parser, "_reader", None)
        if timeout != 0 or sock is None or not hasattr(reader, "has_data") or not 0 <= sock.fileno() < FD_SETSIZE:
            return super().can_read(timeout)  # type: ignore[no-any-return]
        if reader.has_data():
            return True
        try:
            return bool(_select_now()([sock], [], [], 0)[0])
        except (OSError, ValueError) as exc:  # closed under us by another thread
            raise redis.ConnectionError("the connection to Redis was closed") from exc


@functools.cache
def _select_now() -> Callable[..., Any]:
    """The operating system's `select`, for calls that do not wait. gevent's (once it patched `select`) would turn
    even those into a pass of its event loop; any other process has only the one."""
    monkey = sys.modules.get("gevent.monkey")
    return monkey.get_original("select", "select") if monkey is not None else select.select  # type: ignore[no-any-return]


class KernelTimeoutConnection(NativePackingConnection):
    """A TCP connection whose reads and writes time out in the kernel (`SO_RCVTIMEO`, `SO_SNDTIMEO`).

    A Python socket with a timeout polls before every send and receive: two system calls more per
    round trip, on every request. A blocking socket with kernel timeouts fails a stalled call after
    the same time (as a connection error, which the store turns into `StoreUnavailable`)."""

    def __init__(self, *, io_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]
        self.io_timeout_s = io_timeout_s

    def _connect(self) -> socket.socket:
        sock: socket.socket = super()._connect()  # type: ignore[no-untyped-call]
        seconds = int(self.io_timeout_s)
        timeval = struct.pack("ll", seconds, int((self.io_timeout_s - seconds) * 1_000_000))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
        return sock


def connect(url: str, timeout_s: float = 2.0, *, service: str | None = None) -> redis.Redis:
    """A client that fails fast: callers turn a dead or stalled Redis into a 503, never into a hang.

    A `sentinel://` URL gives a client of the primary that Sentinel names `service` (see `sentinel`), a
    `redis+cluster://` URL a client of the cluster (see `connect_cluster`)."""
    if is_cluster_url(url):
        return connect_cluster(url, timeout_s)  # type: ignore[return-value]  # the store uses the client untyped
    timeouts: dict[str, Any] = {"socket_timeout": timeout_s}
    sentinel = failover.is_sentinel_url(url)
    if (url.startswith("redis://") or sentinel) and sys.platform != "win32":  # Windows wants ms, not a timeval
        timeouts = {"socket_timeout": None, "connection_class": KernelTimeoutConnection, "io_timeout_s": timeout_s}
    open_client = functools.partial(failover.connect_primary, url, service) if sentinel else functools.partial(
        StoreClient.from_url, url)
    return open_client(
        decode_responses=True,
        socket_connect_timeout=min(timeout_s, 1.0),
        socket_keepalive=True,
        socket_keepalive_options=keepalive_options(),
        health_check_interval=15,
        retry=Retry(NoBackoff(), 1),
        **timeouts,
    )


def seed_nodes(url: str) -> tuple[list[ClusterNode], dict[str, Any]]:
    """The seed nodes of a `redis+cluster://` URL, and the connection options it carries."""
    parts = urlsplit(url)
    if parts.scheme not in CLUSTER_SCHEMES:
        raise ValueError(f"not a Redis Cluster URL: {parts.scheme}://")
    credentials, _, hosts = parts.netloc.rpartition("@")
    nodes = []
    for host in hosts.split(","):
        name, _, port = host.strip().rpartition(":")
        if not name or not port.isdigit():
            raise ValueError("a Redis Cluster URL names its seed nodes as host:port, comma-separated")
        nodes.append(ClusterNode(name.strip("[]"), int(port)))  # type: ignore[no-untyped-call]
    options: dict[str, Any] = {}
    if credentials:
        user, _, password = credentials.partition(":")
        options.update(username=unquote(user) or None, password=unquote(password) or None)
    if parts.scheme.startswith("rediss"):
        options["ssl"] = True
    return nodes, options


def connect_cluster(url: str, timeout_s: float, **options: Any) -> ScriptingCluster:
    """A cluster client that fails as fast as the single-server one: a node that is down or failing over
    turns into a 503 with Retry-After, not into a request that hangs while the cluster elects a replica.

    One retry (on a fresh view of the slots) covers a redirect after a resharding or a failover that is
    already done. `options` go to redis-py's `RedisCluster` as they are."""
    nodes, from_url = seed_nodes(url)
    if not from_url.get("ssl"):  # TLS wants redis-py's own connection class
        options.setdefault("connection_class", NativePackingConnection)
    return ScriptingCluster(
        startup_nodes=nodes,
        decode_responses=True,
        socket_timeout=timeout_s,
        socket_connect_timeout=min(timeout_s, 1.0),
        socket_keepalive=True,
        socket_keepalive_options=keepalive_options(),
        retry=Retry(NoBackoff(), 1),
        **from_url,
        **options,
    )


class _RedisErrors:
    """`redis_errors`' context manager: a class, since it wraps every call to the store, and one made from a
    generator costs several times as much to enter and leave. It keeps no state, so one serves every caller."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if kind is not None and issubclass(kind, REDIS_DOWN):
            raise StoreUnavailable() from exc


_REDIS_ERRORS = _RedisErrors()


def redis_errors() -> _RedisErrors:
    """Turn Redis being down or unreachable into `StoreUnavailable` (`with redis_errors(): ...`)."""
    return _REDIS_ERRORS


def through_outage(call: Callable[[], T], tolerance_s: float, stop: threading.Event | None = None) -> T:
    """`call`, retried while Redis is unreachable for up to `tolerance_s` (a restart, a stall, a failover), with a
    doubling wait; raises the last `StoreUnavailable` past that, or as soon as `stop` is set. For a write whose
    caller has no better moment to make it: what outlives the tolerance is left to leases and the sweeper."""
    deadline = time.monotonic() + tolerance_s
    delay = 0.05
    while True:
        try:
            return call()
        except StoreUnavailable:
            if time.monotonic() + delay > deadline:
                raise
            if stop is None:
                time.sleep(delay)
            elif stop.wait(delay):
                raise
            delay = min(delay * 2, 1.0)
