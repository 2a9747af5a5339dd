"""`tasks-backend web` as deployed (gunicorn, its worker class, the app) under slow and greedy clients: polls and
`/healthz` keep answering while sockets dribble their headers and while one principal holds many streams, and slow
clients meet header and body read deadlines."""

from __future__ import annotations

import contextlib
import json
import select
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tasks_backend.devtools.embedded import EmbeddedRedis, free_port
from tests.conftest import ALICE, make_settings, wait_until
from tests.support.procs import Proc, settings_env, wait_for_http

HEADER_TIMEOUT = 3
BODY_TIMEOUT = 3
#: Event streams held in one web process: more than redis-py's default pool of 100 connections.
STREAMS = 120
#: A bound that only a blocked server misses, however busy the machine is.
ANSWER_WITHIN = 8.0


def start_web(redis_url_base: str, log: Path, **env: str) -> tuple[Proc, str]:
    settings = make_settings(redis_url_base)
    port = free_port()
    proc = Proc([sys.executable, "-m", "tasks_backend.cli", "web", "--workers", "1", "--bind", f"127.0.0.1:{port}"],
                settings_env(settings, TASKS_BACKEND_TOKENS="alice:alice-token", TASKS_BACKEND_SSE_MAX="60",
                             TASKS_BACKEND_MAX_STREAMS="1000",
                             TASKS_BACKEND_HEADER_TIMEOUT=str(HEADER_TIMEOUT),
                             TASKS_BACKEND_BODY_TIMEOUT=str(BODY_TIMEOUT), **env), log)
    base = f"http://127.0.0.1:{port}"
    wait_for_http(f"{base}/healthz", proc.popen, log, 60, "tasks-backend web")
    return proc, base


@pytest.fixture(scope="module")
def web(redis_base: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, base = start_web(redis_base, tmp_path_factory.mktemp("web") / "web.log")
    try:
        yield base
    finally:
        proc.stop()


def connect(base: str) -> socket.socket:
    host, port = base.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=ANSWER_WITHIN)


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(65536, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def queued_job(base: str) -> str:
    """A job that stays queued (no worker runs here): its streams stay open."""
    answer = httpx.post(f"{base}/v1/jobs", headers=ALICE, json={"operation": "demo.sleep", "params": {"seconds": 1}})
    assert answer.status_code == 202, answer.text
    return str(answer.json()["taskId"])


def assert_api_answers(base: str, job_id: str) -> None:
    for _ in range(3):
        assert httpx.get(f"{base}/healthz", timeout=ANSWER_WITHIN).status_code == 200
        assert httpx.get(f"{base}/v1/jobs/{job_id}", headers=ALICE, timeout=ANSWER_WITHIN).status_code == 200
    made = httpx.post(f"{base}/v1/jobs", headers=ALICE, timeout=ANSWER_WITHIN,
                      json={"operation": "demo.sleep", "params": {"seconds": 1}})
    assert made.status_code == 202


def test_sockets_dribbling_headers_neither_block_the_api_nor_stay_open(web: str) -> None:
    job_id = queued_job(web)
    dribblers = [connect(web) for _ in range(25)]
    stop = threading.Event()

    def dribble() -> None:
        for sock in dribblers:
            with contextlib.suppress(OSError):
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        while not stop.wait(0.5):
            for sock in dribblers:
                with contextlib.suppress(OSError):
                    sock.sendall(b"X-Slow: 1\r\n")

    thread = threading.Thread(target=dribble, daemon=True)
    thread.start()
    try:
        assert_api_answers(web, job_id)
        # The header deadline: the server hangs up on every one of them, though each keeps sending.
        wait_until(lambda: all(closed_by_server(s) for s in dribblers), timeout=HEADER_TIMEOUT + 15,
                   interval=0.2, message="the server to close the dribbling connections")
    finally:
        stop.set()
        thread.join()
        for sock in dribblers:
            sock.close()


def test_a_body_that_does_not_arrive_in_time_gets_a_408(web: str) -> None:
    with connect(web) as sock:
        sock.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer alice-token\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"operation\": ")
        sock.settimeout(BODY_TIMEOUT + 15)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer
    assert json.loads(body)["status"] == 408


def _request(base: str, method: str, path: str, body: dict[str, object] | None = None,
             headers: dict[str, str] | None = None) -> socket.socket:
    """Send a request and leave its answer unread (as a client holding a stream does)."""
    payload = json.dumps(body).encode() if body is not None else b""
    lines = [f"{method} {path} HTTP/1.1", "Host: x", "Authorization: Bearer alice-token",
             f"Content-Length: {len(payload)}", "Content-Type: application/json",
             *(f"{k}: {v}" for k, v in (headers or {}).items())]
    sock = connect(base)
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
    return sock


def test_streams_of_one_principal_do_not_take_the_capacity_polls_need(web: str) -> None:
    job_id = queued_job(web)
    held: list[socket.socket] = []
    try:
        for _ in range(STREAMS):
            held.append(_request(web, "GET", f"/v1/jobs/{job_id}/events"))
        for _ in range(6):  # blocking sends of jobs nobody runs: they wait for a terminal or interrupted state
            message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER",
                       "parts": [{"data": {"operation": "demo.sleep", "params": {"seconds": 1}}}]}
            held.append(_request(web, "POST", "/a2a", {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                                        "params": {"message": message}}, {"A2A-Version": "1.0"}))
        for _ in range(6):
            meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
            held.append(_request(web, "POST", "/mcp", {
                "jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
                "params": {"notifications": {"taskIds": [job_id]}, "_meta": meta}},
                {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "subscriptions/listen",
                 "Accept": "application/json, text/event-stream"}))
        for sock in held[:STREAMS]:
            assert sock.recv(12) == b"HTTP/1.1 200"  # the event streams are open
        assert_api_answers(web, job_id)
    finally:
        for sock in held:
            sock.close()


def test_a_stalled_redis_is_a_503_not_a_hang(tmp_path: Path) -> None:
    redis = EmbeddedRedis(appendonly=False).start()
    proc = None
    try:
        proc, base = start_web(f"redis://127.0.0.1:{redis.port}", tmp_path / "web.log",
                               TASKS_BACKEND_REDIS_TIMEOUT="1")
        job_id = queued_job(base)
        assert redis.process is not None
        redis.process.send_signal(signal.SIGSTOP)
        try:
            answer = httpx.get(f"{base}/v1/jobs/{job_id}", headers=ALICE, timeout=ANSWER_WITHIN + 5)
            assert answer.status_code == 503 and answer.headers["Retry-After"]
        finally:
            redis.process.send_signal(signal.SIGCONT)
    finally:
        if proc is not None:
            proc.stop()
        redis.stop()


@pytest.mark.parametrize(("request_head", "status"), [
    (b"GET /v1/jobs/" + b"x" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    (b"GET /healthz HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % n for n in range(200)) + b"\r\n", 431),
    (b"NOT A REQUEST LINE\r\n\r\n", 400),
])
def test_requests_the_server_cannot_parse_get_a_problem_not_html(web: str, request_head: bytes, status: int) -> None:
    with connect(web) as sock:
        sock.sendall(request_head)
        sock.settimeout(10)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status), answer[:200]
    assert b"Content-Type: application/problem+json" in head
    problem = json.loads(body)
    assert problem["status"] == status and b"xxxx" not in body and b"yyyy" not in body
    assert body == json.dumps(problem, separators=(",", ":")).encode() + b"\n"  # as every other answer


def _read_to_end(sock: socket.socket, timeout: float) -> bytes:
    sock.settimeout(timeout)
    answer = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_a_stopping_web_process_ends_held_streams_and_blocking_sends_at_once(redis_base: str,
                                                                            tmp_path: Path) -> None:
    """SIGTERM, as a deploy sends it: the process stops within seconds, not after gunicorn's graceful timeout
    (30 s) spent waiting on streams blocked in Redis. Each held request ends as its own deadline would: the
    event streams close cleanly (their clients reconnect elsewhere) and the blocking send answers with the task
    as it stands."""
    proc, base = start_web(redis_base, tmp_path / "web.log")
    try:
        job_id = queued_job(base)
        stream = _request(base, "GET", f"/v1/jobs/{job_id}/events")
        listen = _request(base, "POST", "/mcp", {
            "jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
            "params": {"notifications": {"taskIds": [job_id]},
                       "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                 "io.modelcontextprotocol/clientCapabilities": {
                                     "extensions": {"io.modelcontextprotocol/tasks": {}}}}}},
            {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "subscriptions/listen",
             "Accept": "application/json, text/event-stream"})
        message = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER",
                   "parts": [{"data": {"operation": "demo.sleep", "params": {"seconds": 1}}}]}
        send = _request(base, "POST", "/a2a", {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                                               "params": {"message": message}}, {"A2A-Version": "1.0"})
        assert stream.recv(12) == b"HTTP/1.1 200" and listen.recv(12) == b"HTTP/1.1 200"
        # The blocking send is waiting once its task exists (nobody runs it here) and it has not answered.
        wait_until(lambda: len(httpx.get(f"{base}/v1/jobs", headers=ALICE).json()["jobs"]) == 2, 10,
                   message="the blocking send's task")
        assert select.select([send], [], [], 0)[0] == []  # not answered: it waits for the task to end

        proc.kill_group(signal.SIGTERM)
        proc.popen.wait(ANSWER_WITHIN)  # raises if the process still waits on its streams

        for sock in (stream, listen):
            assert _read_to_end(sock, 1).endswith(b"0\r\n\r\n")  # the chunked body's last chunk: a clean end
        answer = _read_to_end(send, 1)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        assert b'"TASK_STATE_SUBMITTED"' in answer or b'"TASK_STATE_WORKING"' in answer, answer[-300:]
    finally:
        proc.stop()


def test_the_access_log_names_the_client_the_entrance_found(redis_base: str, tmp_path: Path) -> None:
    """Behind a trusted reverse proxy each access line shows the client the proxy forwarded, not the proxy, refused
    requests' lines included."""
    log = tmp_path / "web.log"
    proc, base = start_web(redis_base, log, TASKS_BACKEND_TRUSTED_PROXIES="1")
    try:
        forwarded = {**ALICE, "X-Forwarded-For": "198.51.100.1, 203.0.113.5"}  # the left entry is the client's
        assert httpx.get(f"{base}/v1/jobs", headers=forwarded).status_code == 200
        assert httpx.get(f"{base}/v1/jobs?limit=1", headers=ALICE).status_code == 200  # no proxy in between
        # A request refused at the first check (its Origin) is logged with the forwarded client too.
        refused = {**forwarded, "Origin": "https://elsewhere.example"}
        assert httpx.get(f"{base}/v1/jobs?limit=2", headers=refused).status_code == 403

        def access(path: str) -> str | None:
            return next((line for line in log.read_text().splitlines()
                         if "gunicorn.access" in line and f"GET {path} " in line), None)

        line = wait_until(lambda: access("/v1/jobs"), 10, message="the access line")
        assert '"message": "203.0.113.5 - - [' in line, line
        line = wait_until(lambda: access("/v1/jobs?limit=1"), 10, message="the second access line")
        assert '"message": "127.0.0.1 - - [' in line, line
        line = wait_until(lambda: access("/v1/jobs?limit=2"), 10, message="the refused request's access line")
        assert '"message": "203.0.113.5 - - [' in line and '" 403 ' in line, line
    finally:
        proc.stop()


def session_cookie(base: str, headers: dict[str, str] | None = None, source: str | None = None) -> str:
    """The session cookie the web page sets on a first visit, asked from `source` (a loopback address)."""
    transport = httpx.HTTPTransport(local_address=source) if source else None
    with httpx.Client(base_url=base, transport=transport, timeout=ANSWER_WITHIN) as page:
        answer = page.get("/ui/signin", headers=headers)
    assert answer.status_code == 200, answer.text[:300]
    cookie = answer.headers["Set-Cookie"]
    assert cookie.startswith("tb_ui_session="), cookie
    return cookie


def is_secure(cookie: str) -> bool:
    return "secure" in [attribute.strip().lower() for attribute in cookie.split(";")]


def test_behind_a_balancer_on_another_host_the_scheme_it_forwards_is_believed(redis_base: str,
                                                                              tmp_path: Path) -> None:
    """TASKS_BACKEND_TRUSTED_PROXIES=1 decides, whatever the balancer's address (here 127.0.0.2, which is not
    gunicorn's own loopback default): the page's cookie is Secure when the balancer says the client came over
    https, and the client is the one it forwards."""
    log = tmp_path / "web.log"
    proc, base = start_web(redis_base, log, TASKS_BACKEND_TRUSTED_PROXIES="1")
    try:
        forwarded = {"X-Forwarded-For": "203.0.113.5", "X-Forwarded-Proto": "https"}
        assert is_secure(session_cookie(base, forwarded, source="127.0.0.2"))
        assert not is_secure(session_cookie(base, {**forwarded, "X-Forwarded-Proto": "http"}, source="127.0.0.2"))
        line = wait_until(lambda: next((entry for entry in log.read_text().splitlines()
                                        if "gunicorn.access" in entry and "GET /ui/signin " in entry), None),
                          10, message="the access line")
        assert '"message": "203.0.113.5 - - [' in line, line
    finally:
        proc.stop()


def test_without_trusted_proxies_no_peer_is_believed_about_the_scheme(web: str) -> None:
    """TASKS_BACKEND_TRUSTED_PROXIES=0 (the default): X-Forwarded-Proto is a header any client can write, from
    loopback too."""
    assert not is_secure(session_cookie(web, {"X-Forwarded-Proto": "https"}))


def test_the_cookie_is_secure_whenever_the_public_url_is_https(redis_base: str, tmp_path: Path) -> None:
    """People reach the page at the public URL: an https one makes the cookie Secure, whatever the hop to the web
    process was and whether or not a proxy is trusted to say so."""
    proc, base = start_web(redis_base, tmp_path / "web.log", TASKS_BACKEND_PUBLIC_URL="https://tasks.example.com")
    try:
        assert is_secure(session_cookie(base))
        assert is_secure(session_cookie(base, {"X-Forwarded-Proto": "http"}, source="127.0.0.2"))
    finally:
        proc.stop()


def test_web_processes_on_one_host_share_no_control_socket(redis_base: str, tmp_path: Path) -> None:
    """gunicorn's control interface (which nothing here uses) binds one socket path per user by default: a second
    `tasks-backend web` or `make run` on the host would take it over from the first. None is opened."""
    home = tmp_path / "home"
    home.mkdir()
    proc, base = start_web(redis_base, tmp_path / "web.log", HOME=str(home))
    try:
        assert httpx.get(f"{base}/healthz", timeout=ANSWER_WITHIN).status_code == 200
        assert not (home / ".gunicorn").exists(), sorted(str(p) for p in home.rglob("*"))
    finally:
        proc.stop()


def test_no_peer_moves_the_apps_mount_point_or_path(web: str) -> None:
    """gunicorn's default believes `SCRIPT_NAME` and `PATH_INFO` headers from a loopback peer; here no peer's are
    believed: the path asked for is the one served."""
    for header in ({"SCRIPT_NAME": "/elsewhere"}, {"PATH_INFO": "/v1/jobs"}):
        answer = httpx.get(f"{web}/healthz", headers=header, timeout=10)
        assert answer.status_code == 200, (header, answer.status_code, answer.text)
        assert answer.json()["status"] == "ok"
