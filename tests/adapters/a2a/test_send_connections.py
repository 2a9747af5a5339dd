"""A2A blocking `SendMessage` whose client hangs up, in `tasks-backend web` as deployed (gunicorn, its gevent worker,
the app) on a Redis of the test's own, whose own figures (`INFO clients`, `CLIENT LIST`) are what is read.

A blocking send on a job that never moves holds one Redis connection in a blocking read and one of its principal's
stream slots; once its client hangs up, nothing reads for it within moments and the slot is given back only then,
so hanging up more sends than the principal may hold at once never locks it out."""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tasks_backend.devtools.embedded import EmbeddedRedis, free_port
from tasks_backend.store.keys import Keys
from tests.adapters.mcp.test_listen_connections import ANSWER_WITHIN, STOPPED_WITHIN, Web
from tests.conftest import make_settings, wait_until
from tests.support.procs import Proc, settings_env, wait_for_http

#: The principal's stream slots: the test hangs up twice as many blocking sends, one after another.
MAX_STREAMS = 3


@pytest.fixture
def web(tmp_path: Path) -> Iterator[Web]:
    server = EmbeddedRedis(appendonly=False).start()
    settings = make_settings(f"redis://127.0.0.1:{server.port}")
    port = free_port()
    # No worker: the jobs stay queued (parked), so a blocking send on one waits as long as the job lives.
    proc = Proc([sys.executable, "-m", "tasks_backend.cli", "web", "--workers", "1", "--bind", f"127.0.0.1:{port}"],
                settings_env(settings, TASKS_BACKEND_TOKENS="alice:alice-token",
                             TASKS_BACKEND_MAX_STREAMS=str(MAX_STREAMS)), tmp_path / "web.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{base}/healthz", proc.popen, tmp_path / "web.log", 60, "tasks-backend web")
        yield Web(base, redis.Redis.from_url(settings.redis_url, decode_responses=True), Keys(settings.key_prefix))
    except BaseException:
        print(proc.output()[-4000:])
        raise
    finally:
        proc.stop()
        server.stop()
    # A client hanging up is ordinary: nothing of it shows as an error in the log.
    assert "Traceback" not in proc.output() and "Error handling request" not in proc.output(), proc.output()[-4000:]


def blocking_send(web: Web) -> socket.socket:
    """A blocking `SendMessage` of a job no worker will run, its request sent and its answer not read."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": "m", "role": "ROLE_USER",
        "parts": [{"data": {"operation": "demo.sleep", "params": {"seconds": 1}}}]}}}).encode()
    host, port = web.base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=ANSWER_WITHIN)
    head = ["POST /a2a HTTP/1.1", "Host: x", "Authorization: Bearer alice-token", "A2A-Version: 1.0",
            "Content-Type: application/json", f"Content-Length: {len(body)}"]
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
    return sock


def test_a_hung_up_blocking_send_stops_reading_and_gives_its_slot_back_after(web: Web) -> None:
    streams_key = web.keys.streams("alice")

    def snapshot() -> tuple[int, int]:
        # One transaction, so the two figures are of the same moment: (blocked clients, alice's open streams).
        pipe = web.store.pipeline(transaction=True)
        pipe.info("clients")
        pipe.zcard(streams_key)
        clients, slots = pipe.execute()
        return int(clients["blocked_clients"]), int(slots)

    for _ in range(2 * MAX_STREAMS):  # were a hung-up send's slot kept, the fourth would be refused
        sock = blocking_send(web)
        try:
            wait_until(lambda: snapshot() == (1, 1), ANSWER_WITHIN, message="the send's blocking read")
            assert web.blocked_in_xread() == 1, web.store.client_list()
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):  # held, not answered (as a refusal would be)
                sock.recv(1)
        finally:
            sock.close()
        hung_up = time.monotonic()

        seen = []
        while (now := snapshot()) != (0, 0):
            seen.append(now)
            assert time.monotonic() - hung_up < STOPPED_WITHIN, f"still reading after the hang-up: {seen[-5:]}"
            time.sleep(0.005)
        # Never was the slot free while a read for it went on.
        assert all(slots == 1 for blocked, slots in seen if blocked), seen
    # The web process keeps a handful of connections, not one per send it served.
    assert int(web.clients()["connected_clients"]) <= 20, web.store.client_list()
