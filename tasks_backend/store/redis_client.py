"""The store's client of one Redis server: redis-py's, with a leaner round trip for a plain command."""

from __future__ import annotations

import os
from typing import Any

import redis

#: Connections a client keeps out of its pool for its plain commands: as many as run at once, most of the time,
#: in one web or worker process (the rest go back to the pool as before).
KEPT = 4


def _should_reconnect(conn: Any) -> bool:
    """Whether redis-py marked the connection to be made again (its maintenance notices; older releases have none)."""
    check = getattr(conn, "should_reconnect", None)
    return bool(check()) if check is not None else False


class StoreClient(redis.Redis):
    """The store's client of one server (or of a Sentinel-named primary): a plain command's round trip without
    redis-py's per-command hooks for its own OpenTelemetry metrics, which this product does not turn on (their
    arguments are built on every command all the same: about 5 us a command, measured in one process). The
    command is retried after a disconnect as the client's `Retry` says, a connection marked to be made again is
    made again, as redis-py does. A command with options (a reply's shape, a decoding rule), HIMPORT, a client
    bound to one connection and a pool with redis-py's client-side cache take redis-py's own path.

    With redis-py's plain pool (not Sentinel's, whose release drops a connection to a demoted primary), the client
    keeps up to `KEPT` connections between plain commands instead of handing them back: the pool's checkout and
    return, with its fork check, its lock, its metrics and its release event, cost about 3% of a web worker's
    instructions a submit. A kept connection is checked before each use as the pool checks one (data left over,
    or a server that closed it: made again), belongs to the process that made it (a forked child starts with none),
    counts as in use for the pool's limit, and goes back to the pool when the client is closed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._kept: list[Any] = []
        self._kept_pid = os.getpid()
        self._keeps = type(self.connection_pool) is redis.ConnectionPool

    def _execute_command(self, *args: Any, **options: Any) -> Any:
        pool = self.connection_pool
        # `keys` (which keys a read names) serves redis-py's client-side cache alone, which the store never turns on.
        # HIMPORT needs redis-py's set-up of the connection first.
        if self.connection is not None or any(name != "keys" for name in options) or getattr(pool, "cache", None) \
                or str(args[0]).upper().startswith("HIMPORT"):
            return super()._execute_command(*args, **options)  # type: ignore[no-untyped-call]
        conn: Any = self._take(pool)
        try:
            return conn.retry.call_with_retry(lambda: self._round_trip(conn, args), lambda _: conn.disconnect())
        finally:
            try:
                if _should_reconnect(conn):
                    conn.disconnect()
                    conn.connect()
            finally:
                self._give_back(pool, conn)

    def _take(self, pool: Any) -> Any:
        if not self._keeps:
            return pool.get_connection()
        if self._kept_pid != os.getpid():
            # Forked: the parent's connections are the parent's (the pool starts afresh in the child as well).
            self._kept, self._kept_pid = [], os.getpid()
        try:
            conn = self._kept.pop()
        except IndexError:
            return pool.get_connection()
        try:
            fresh = not conn.can_read()
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            fresh = False
        if not fresh:  # a reply left unread, or a server that closed it: the pool would make it again too
            try:
                conn.disconnect()
                conn.connect()
            except BaseException:
                pool.release(conn)  # not lost to the pool's count while Redis is away
                raise
        return conn

    def _give_back(self, pool: Any, conn: Any) -> None:
        if self._keeps and len(self._kept) < KEPT and self._kept_pid == os.getpid():
            self._kept.append(conn)
        else:
            pool.release(conn)

    def close(self) -> None:
        kept, self._kept = self._kept, []
        if self._kept_pid == os.getpid():
            for conn in kept:
                self.connection_pool.release(conn)
        super().close()

    def _round_trip(self, conn: Any, args: tuple[Any, ...]) -> Any:
        conn.send_command(*args)
        if getattr(conn, "_resp2_fallback", False):  # a server that refused RESP3: redis-py picks the reply's parser
            return self.parse_response(conn, args[0])  # type: ignore[no-untyped-call]
        reply = conn.read_response()
        callback = self.response_callbacks.get(args[0])  # type: ignore[no-untyped-call]
        return reply if callback is None else callback(reply)
