"""The pool's check of a connection before it hands it out: left-over data or a server that closed the
connection gets a fresh one; under gevent the check costs one system call, not a pass of gevent's loop."""

from __future__ import annotations

import fcntl
import json
import resource
import socket
import subprocess
import sys
from typing import Any

import redis

from tasks_backend.store.connect import FD_SETSIZE, NativePackingConnection, connect
from tests.conftest import wait_until
from tests.support.procs import ROOT


def idle_connection(client: redis.Redis) -> Any:
    """The one connection the client holds between commands, after a command made it (the store's client keeps it
    out of the pool: `StoreClient`)."""
    client.ping()
    (conn,) = client._kept  # type: ignore[attr-defined]
    return conn


def unusable(conn: Any) -> bool:
    """What the pool reconnects: a connection that reads as readable, or whose check fails (redis-py's own says
    so of a closed socket with an error)."""
    try:
        return bool(conn.can_read())
    except redis.ConnectionError:
        return True


def test_an_idle_healthy_connection_is_handed_out_as_it_is(redis_base: Any) -> None:
    client = connect(f"{redis_base}/3")
    conn = idle_connection(client)
    assert isinstance(conn, NativePackingConnection)
    assert conn.can_read() is False
    before = client.client_id()
    assert client.client_id() == before


def test_a_connection_the_server_closed_is_replaced_before_a_command_uses_it(redis_base: Any) -> None:
    client = connect(f"{redis_base}/3")
    conn = idle_connection(client)
    killed = client.client_id()
    redis.Redis.from_url(f"{redis_base}/3").client_kill_filter(_id=killed)
    wait_until(lambda: unusable(conn), 5, message="the closed connection to read as unusable")
    # Replaced at checkout (the client reconnects this same object, as the pool would), not by a failed command
    # and a retry: with no retry the command still succeeds.
    conn.retry = redis.retry.Retry(redis.backoff.NoBackoff(), 0)
    assert client.client_id() != killed


def test_a_connection_with_a_reply_left_unread_reads_as_readable(redis_base: Any) -> None:
    client = connect(f"{redis_base}/3")
    conn = idle_connection(client)
    conn.send_command("PING")
    wait_until(conn.can_read, 5, message="the reply to arrive")
    assert conn.read_response() == "PONG"
    assert conn.can_read() is False


def test_a_connection_past_selects_reach_is_checked_and_kept(redis_base: Any) -> None:
    """A busy gevent web worker holds thousands of sockets, so a Redis connection may get a descriptor `select`
    cannot take: it is checked as redis-py checks it, and handed out as it is rather than reconnected each time."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft <= FD_SETSIZE + 16:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * FD_SETSIZE), hard))
    client = connect(f"{redis_base}/3")
    conn = idle_connection(client)
    low = conn._sock
    # The same connection on a descriptor past select's reach: the connection and its reply parser use it.
    high = fcntl.fcntl(low.fileno(), fcntl.F_DUPFD, FD_SETSIZE)  # the lowest free descriptor from there
    conn._sock = conn._parser._sock = socket.socket(fileno=high)
    low.close()
    try:
        assert high >= FD_SETSIZE
        assert conn.can_read() is False
        before = client.client_id()
        assert client.client_id() == before
        assert conn._sock.fileno() == high
    finally:
        client.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


GEVENT_CHECK = """
import json, sys
from gevent import monkey
monkey.patch_all()
import select
from tasks_backend.store.connect import connect

counts = {"poll": 0, "select": 0}
patched_poll, patched_select = select.poll, select.select

def poll(*a, **k):
    counts["poll"] += 1
    return patched_poll(*a, **k)

def select_(*a, **k):
    counts["select"] += 1
    return patched_select(*a, **k)

select.poll, select.select = poll, select_
client = connect(sys.argv[1])
for _ in range(200):
    client.get("checkout")
print(json.dumps(counts))
"""


def test_under_gevent_the_check_uses_none_of_gevents_polling(redis_base: Any) -> None:
    """gevent's `poll` (what redis-py checks with) and its `select` each yield to gevent's loop: 200 commands
    through the store's client call neither."""
    done = subprocess.run([sys.executable, "-c", GEVENT_CHECK, f"{redis_base}/3"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"poll": 0, "select": 0}
