"""Hostile callers against `tasks-backend web` as shipped: polls measured idle, with many event streams held open,
and with many sockets dribbling their headers, side by side in one run.

Usage: python -m bench.hostile [--streams 1000] [--dribblers 200] [--seconds 10]

Rows: "N event streams held open: poll p99 vs idle" (target at most 2x) and "N sockets dribbling headers: poll
throughput vs idle" (target at least 0.9x). The streams belong to one principal, so the stream limit is raised for the
run; dribblers that the header deadline cuts off connect again, so N stay open throughout.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx

from tasks_backend.devtools.embedded import EmbeddedRedis, free_port

from . import procs
from .load import Load, Run, run

ROOT = procs.ROOT


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


@contextlib.contextmanager
def event_streams(port: int, token: str, job_id: str, count: int) -> Iterator[list[socket.socket]]:
    """`count` open `GET /v1/jobs/{id}/events` streams, each answered 200 before the load starts."""
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = _connect(port)
            sock.sendall(f"GET /v1/jobs/{job_id}/events HTTP/1.1\r\nHost: bench\r\n"
                         f"Authorization: Bearer {token}\r\n\r\n".encode())
            held.append(sock)
        for sock in held:
            status = sock.recv(12)
            if status != b"HTTP/1.1 200":
                raise RuntimeError(f"an event stream was refused: {status!r}")
        yield held
    finally:
        for sock in held:
            sock.close()


@contextlib.contextmanager
def dribblers(port: int, count: int, every_s: float = 1.0) -> Iterator[None]:
    """`count` sockets each sending one header line every `every_s` seconds, reconnecting when cut off."""
    stop = threading.Event()
    socks: list[socket.socket | None] = [None] * count

    def loop() -> None:
        while not stop.is_set():
            for i in range(count):
                try:
                    if socks[i] is None:
                        sock = _connect(port)
                        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: bench\r\n")
                        socks[i] = sock
                    else:
                        socks[i].sendall(b"X-Slow: 1\r\n")  # type: ignore[union-attr]
                except OSError:
                    if socks[i] is not None:
                        socks[i].close()  # type: ignore[union-attr]
                    socks[i] = None
            stop.wait(every_s)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        for sock in socks:
            if sock is not None:
                sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--dribblers", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()

    logs = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    redis = EmbeddedRedis(appendonly=False).start()
    port, token = free_port(), secrets.token_urlsafe(16)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": redis.url,
           "TASKS_BACKEND_TOKENS": f"bench:{token}",
           # One principal holds every stream and sends every poll: its limits must not be what is measured.
           "TASKS_BACKEND_MAX_STREAMS": str(args.streams + 10), "TASKS_BACKEND_RATE_LIMIT": "0",
           "TASKS_BACKEND_SSE_MAX": str(args.seconds * 4 + 60)}
    web = procs.start("web", [sys.executable, "-m", "tasks_backend.cli", "web", "--workers", str(args.workers),
                              "--bind", f"127.0.0.1:{port}"], env, logs)
    try:
        url = f"http://127.0.0.1:{port}"
        procs.wait_http(web, f"{url}/healthz")
        headers = {"Authorization": f"Bearer {token}"}
        job_id = httpx.post(f"{url}/v1/jobs", headers=headers,  # no worker runs here: the job stays queued
                            json={"operation": "demo.sleep", "params": {"seconds": 1}}).json()["taskId"]
        poll = Load(url=url, path=f"/v1/jobs/{job_id}", headers=headers)

        def measure() -> Run:
            run(poll, seconds=2, connections=32, threads=2)  # warm
            return run(poll, seconds=args.seconds, connections=32, threads=2)

        idle = measure()
        with dribblers(port, args.dribblers):
            dribbled = measure()
        # Last: the server notices closed streams only at their next write, so they outlive this block.
        with event_streams(port, token, job_id, args.streams):
            streamed = measure()
        print(f"| poll, idle | {idle.rps:,.0f} req/s | p99 {idle.p99_ms:.1f} ms | errors {idle.errors} |")
        print(f"| {args.streams:,} event streams held open: poll p99 vs idle | {streamed.p99_ms / idle.p99_ms:.2f}x "
              f"(target <= 2x) | p99 {streamed.p99_ms:.1f} ms, {streamed.rps:,.0f} req/s | errors {streamed.errors} |")
        print(f"| {args.dribblers} sockets dribbling headers: poll throughput vs idle | {dribbled.rps / idle.rps:.2f}x "
              f"(target >= 0.9x) | {dribbled.rps:,.0f} req/s, p99 {dribbled.p99_ms:.1f} ms "
              f"| errors {dribbled.errors} |")
    finally:
        web.stop()
        redis.stop()


if __name__ == "__main__":
    main()
