"""A2A blocking `SendMessage` whose client hangs up, in `tasks-backend web` as deployed (gunicorn, its gevent worker,
the app) on a Redis of the test's own, whose own figures (`INFO clients`, `CLIENT LIST`) are what is read.

A blocking send on a job that never moves holds one Redis connection in a blocking read and one of its principal's
stream slots; once its client hangs up, nothing reads for it within moments and the slot is given back only then,
so hanging up more sends than the principal may hold at once never locks it out."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.adapters.mcp.test_listen_connections import ANSWER_WITHIN, STOPPED_WITHIN
from tests.conftest import wait_until
from tests.support.web_process import Web, web_without_workers

#: The principal's stream slots: the test hangs up twice as many blocking sends, one after another.
MAX_STREAMS = 3


@pytest.fixture
def web(tmp_path: Path) -> Iterator[Web]:
    with web_without_workers(tmp_path, TASKS_BACKEND_TOKENS="alice:alice-token",
                             TASKS_BACKEND_MAX_STREAMS=str(MAX_STREAMS)) as started:
        yield started


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

    for _ in range(2 * MAX_STREAMS):  # were a hung-up send's slot kept, the fourth would be refused
        sock = blocking_send(web)
        try:
            wait_until(lambda: web.blocked_and_streams("alice") == (1, 1), ANSWER_WITHIN,
                       message="the send's blocking read")
            assert web.blocked_in_xread() == 1, web.store.client_list()
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):  # held, not answered (as a refusal would be)
                sock.recv(1)
        finally:
            sock.close()
        hung_up = time.monotonic()

        web.assert_released("alice", since=hung_up, within=STOPPED_WITHIN)
    # The web process keeps a handful of connections, not one per send it served.
    assert int(web.clients()["connected_clients"]) <= 20, web.store.client_list()
