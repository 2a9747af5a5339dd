"""RabbitMQ for the tests: a virtual host per test session, and removing what a test declared on it.

A session works in a vhost of its own (made with `rabbitmqctl` when the server is local, deleted at the
end with everything in it, Celery's delay queues included), so parallel runs never meet. Each test's
settings also name a queue of their own (`make_settings`); the queue, its dead-letter queue and its
exchange are deleted when the test ends."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit

from kombu import Connection

from tasks_backend.config import Settings
from tasks_backend.running.rabbitmq import delete_queue

AMQP_URL = os.environ.get("TEST_AMQP_URL") or "amqp://guest:guest@127.0.0.1:5672//"
#: A broker address where nothing listens (port 1 is reserved): publishes to it fail at once.
DEAD_AMQP_URL = "amqp://guest:guest@127.0.0.1:1//"


def reachable(url: str = AMQP_URL) -> bool:
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), timeout=2).close()
        return True
    except OSError:
        return False


def _ctl(*args: str) -> bool:
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        return False
    done = subprocess.run([ctl, "-q", *args], capture_output=True, timeout=60, check=False)
    return done.returncode == 0


@contextlib.contextmanager
def session_vhost(url: str = AMQP_URL) -> Iterator[str]:
    """`url` with a fresh vhost (deleted afterwards), or `url` itself where `rabbitmqctl` cannot make one
    (a remote server: then only the per-test queue names keep runs apart)."""
    parts = urlsplit(url)
    user = parts.username or "guest"
    vhost = f"tbtest-{secrets.token_hex(4)}"
    local = parts.hostname in ("127.0.0.1", "localhost", "::1")
    if not (local and _ctl("add_vhost", vhost)):
        yield url
        return
    try:
        assert _ctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*"), "rabbitmqctl set_permissions failed"
        yield parts._replace(path="/" + quote(vhost, safe="")).geturl()
    finally:
        _ctl("delete_vhost", vhost)


def _channel_call(url: str, call: Any) -> Any:
    with Connection(url, connect_timeout=3) as conn:
        conn.ensure_connection(max_retries=1, timeout=3)
        channel: Any = conn.channel()
        try:
            return call(channel)
        finally:
            with contextlib.suppress(Exception):
                channel.close()


def purge(settings: Settings) -> int:
    """Drop every message waiting in the job queue (a lost message, as far as the system can tell)."""
    return int(_channel_call(settings.effective_broker_url, lambda ch: ch.queue_purge(settings.queue)) or 0)


def depth(settings: Settings, queue: str) -> int:
    """Messages ready in `queue` (0 if it does not exist yet)."""
    def call(ch: Any) -> int:
        return int(ch.queue_declare(queue=queue, passive=True)[1])

    try:
        return int(_channel_call(settings.effective_broker_url, call))
    except Exception:
        return 0


def remove(settings: Settings) -> None:
    """Delete the job queue, its dead letters and its exchange."""
    with contextlib.suppress(Exception):
        delete_queue(settings.effective_broker_url, settings.queue)
