"""A job's feed (a Redis stream of its public states): its entries, and reading them for one job or many.

Rule: part of the job store (`RedisStore` reads feeds through `FeedReads`); the feed's entry fields are
named only here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis

from ..model.domain import JobState
from .connect import redis_errors
from .part import StorePart

#: How often a reader of several jobs' feeds on a Redis Cluster looks for new entries (see `events_many`).
CLUSTER_POLL_S = 0.5


@dataclass(frozen=True)
class Event:
    """One entry of a job's feed."""

    id: str
    state: JobState
    updated_ms: int
    message: str | None
    progress: float | None
    total: float | None


def event(entry_id: str, f: Mapping[str, str]) -> Event:
    """A feed entry as the scripts write it: `s` state, `u` updated, `m` message, `d` done, `t` total."""
    return Event(entry_id, JobState(f["s"]), int(f["u"]), f.get("m"),
                 float(f["d"]) if "d" in f else None, float(f["t"]) if "t" in f else None)


class FeedReads(StorePart):
    """The feed reads of the job store."""

    #: One Redis, not a Cluster: one XREAD may name feeds of any slot.
    single: bool

    def events(self, job_id: str, after: str, block_ms: int) -> list[Event]:
        return self.events_many({job_id: after}, block_ms).get(job_id, [])

    def events_many(self, after: Mapping[str, str], block_ms: int) -> dict[str, list[Event]]:
        """The entries of each job's feed past its cursor (job id -> cursor), waiting up to `block_ms` for the
        first: one XREAD over every feed, so a reader of many jobs holds one connection, not one per job.

        On a Redis Cluster each job has a slot of its own and one XREAD names one slot: the feeds of several jobs
        are read there without blocking, one pipeline a round, every `CLUSTER_POLL_S` until something came."""
        job_of = {self.keys.events(job_id): job_id for job_id in after}
        streams = {self.keys.events(job_id): cursor for job_id, cursor in after.items()}
        with redis_errors():
            if self.single:
                reply = blocking_xread(self.redis, streams, block_ms)
            elif len(streams) == 1:
                reply = self._read_on_node(streams, block_ms)
            else:
                reply = self._poll_feeds(streams, block_ms)
        out: dict[str, list[Event]] = {}
        for stream, entries in reply or []:
            out[job_of[stream]] = [event(entry_id, f) for entry_id, f in entries]
        return {job_id: events for job_id, events in out.items() if events}

    def _read_on_node(self, streams: Mapping[str, str], block_ms: int) -> list[Any]:
        """One job's feed on a Redis Cluster: a blocking read on the node that serves its slot, through the
        cluster client where the node is gone or the slot moved (it finds the new owner)."""
        try:
            node = self.redis.get_node_from_key(next(iter(streams)))
            return blocking_xread(self.redis.get_redis_connection(node), streams, block_ms)  # type: ignore[no-any-return]
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            return self.redis.xread(streams, count=100, block=block_ms)  # type: ignore[no-any-return]

    def _poll_feeds(self, streams: Mapping[str, str], block_ms: int) -> list[Any]:
        deadline = time.monotonic() + block_ms / 1000
        while True:
            pipe = self.redis.pipeline(transaction=False)
            for stream, cursor in streams.items():
                pipe.xread({stream: cursor}, count=100)
            reply = [row for rows in pipe.execute() for row in rows or []]
            left = deadline - time.monotonic()
            if reply or left <= 0:
                return reply
            time.sleep(min(CLUSTER_POLL_S, left))


def blocking_xread(client: Any, streams: Mapping[str, str], block_ms: int) -> Any:
    """XREAD ... BLOCK on one connection of `client` whose Redis client id is known, as the client's own call
    would be (one retry on a dropped connection).

    A read cut short here (the process stopping, the stream's client hanging up) closes its connection, and Redis
    counts the read as going on until it notices the close. What follows the cut (a stream slot given back, say)
    goes over another connection and could reach Redis first: ending the reader by its id first means nothing
    done after this returns finds the read still on. Where the server refuses `CLIENT KILL` (an ACL without it),
    Redis ends the read when it sees the close, moments later."""
    args: list[Any] = ["XREAD", "COUNT", 100, "BLOCK", block_ms, "STREAMS", *streams.keys(), *streams.values()]
    pool = client.connection_pool
    conn = pool.get_connection()
    reader: list[int] = []

    def read() -> Any:
        reader[:] = [_client_id(conn)]
        conn.send_command(*args)
        return client.parse_response(conn, "XREAD")

    try:
        return conn.retry.call_with_retry(read, lambda _: conn.disconnect())
    except (redis.ConnectionError, redis.TimeoutError):
        raise  # the connection is gone and so is the read
    except BaseException:
        if reader and conn._sock is None:  # cut off mid-read (an error Redis answered leaves it connected)
            _end_reader(client, reader[0])
        raise
    finally:
        pool.release(conn)


def _client_id(conn: Any) -> int:
    """Redis's id of `conn`, asked once per socket (a reconnected connection is a new client)."""
    known = getattr(conn, "_reader_id", None)
    if known is not None and conn._sock is known[0]:
        return int(known[1])
    conn.send_command("CLIENT", "ID")
    found = int(conn.read_response())
    conn._reader_id = (conn._sock, found)
    return found


def _end_reader(client: Any, reader: int) -> None:
    # Already gone (Redis saw the close), refused, or Redis is away: Redis ends the read by itself.
    with contextlib.suppress(redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
        client.execute_command("CLIENT", "KILL", "ID", reader)
