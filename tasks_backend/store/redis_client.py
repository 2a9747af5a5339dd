"""The store's client of one Redis server: redis-py's, with a leaner round trip for a plain command."""

from __future__ import annotations

from typing import Any

import redis


def _should_reconnect(conn: Any) -> bool:
    """Whether redis-py marked the connection to be made again (its maintenance notices; older releases have none)."""
    check = getattr(conn, "should_reconnect", None)
    return bool(check()) if check is not None else False


class StoreClient(redis.Redis):
    """The store's client of one server (or of a Sentinel-named primary): a plain command's round trip without
    redis-py's per-command hooks for its own OpenTelemetry metrics, which this product does not turn on (their
    arguments are built on every command all the same: about 5 us a command, measured in one process). The
    connection is taken from the pool, the command retried after a disconnect as the client's `Retry` says, a
    connection marked to be made again is made again, and it is given back, as redis-py does. A command with
    options (a reply's shape, a decoding rule), HIMPORT, a client bound to one connection and a pool with
    redis-py's client-side cache take redis-py's own path."""

    def _execute_command(self, *args: Any, **options: Any) -> Any:
        pool = self.connection_pool
        # `keys` (which keys a read names) serves redis-py's client-side cache alone, which the store never turns on.
        # HIMPORT needs redis-py's set-up of the connection first.
        if self.connection is not None or any(name != "keys" for name in options) or getattr(pool, "cache", None) \
                or str(args[0]).upper().startswith("HIMPORT"):
            return super()._execute_command(*args, **options)  # type: ignore[no-untyped-call]
        conn: Any = pool.get_connection()
        try:
            return conn.retry.call_with_retry(lambda: self._round_trip(conn, args), lambda _: conn.disconnect())
        finally:
            try:
                if _should_reconnect(conn):
                    conn.disconnect()
                    conn.connect()
            finally:
                pool.release(conn)

    def _round_trip(self, conn: Any, args: tuple[Any, ...]) -> Any:
        conn.send_command(*args)
        if getattr(conn, "_resp2_fallback", False):  # a server that refused RESP3: redis-py picks the reply's parser
            return self.parse_response(conn, args[0])  # type: ignore[no-untyped-call]
        reply = conn.read_response()
        callback = self.response_callbacks.get(args[0])  # type: ignore[no-untyped-call]
        return reply if callback is None else callback(reply)
