"""A web worker's instructions per request, counted: the dispatch row's two sides, each served by one gunicorn sync
worker run under valgrind's callgrind, against one Redis: the product's priority submit (`tasks-backend web
--threads 1`, as `bench.run` serves it) and the bare `apply_async` route (the same gunicorn command as there).

Usage: python -m bench.web_instructions [--requests 300] [--warm 100]

The dispatch row's rates move with the machine's state by more than a change to the web's Python path is worth; a
worker's count moves by well under a per cent. Counted: the worker process's own instructions (the interpreter, the
app, gunicorn, their libraries), from the accept of each request's connection to its close, its access line
included; not the kernel's work behind its system calls, nor Redis's (`bench.submit_instructions` counts that).
Each request comes on a connection of its own, as wrk's do to a sync worker.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tasks_backend.devtools.embedded import EmbeddedRedis, free_port

from . import procs
from .submit_instructions import BARE, Callgrind, Send, command_line, per_request

PRIORITY = "submit with a priority, fair shares on"
ROWS = (PRIORITY, BARE)

def sender(port: int, path: str, body: str, headers: dict[str, str]) -> Send:
    def send() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            conn.request("POST", path, body=body, headers=headers)
            answer = conn.getresponse()
            answer.read()
        finally:
            conn.close()
        if answer.status != 202:
            raise RuntimeError(f"{path} refused: {answer.status}")
    return send


@contextmanager
def worker_under_callgrind(row: str, redis_url: str, work: Path) -> Iterator[tuple[Send, Callgrind]]:
    """The row's web server (one sync worker) started through callgrind: a sender of its request, and the
    worker's counter."""
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench: {tool} is needed (apt-get install valgrind, or `make bench-instructions`)")
    out_dir = work / "callgrind"
    out_dir.mkdir()
    port, token = free_port(), uuid.uuid4().hex
    env = {**os.environ, "PYTHONPATH": str(procs.ROOT)}
    if row == PRIORITY:
        argv = [str(procs.ROOT / ".venv/bin/tasks-backend"), "web", "--workers", "1", "--threads", "1",
                "--bind", f"127.0.0.1:{port}"]
        env |= {"REDIS_URL": redis_url, "TASKS_BACKEND_JOBS": "bench.jobs", "TASKS_BACKEND_TOKENS": f"bench:{token}",
                "TASKS_BACKEND_RATE_LIMIT": "1000000000", "TASKS_BACKEND_MAX_ACTIVE_JOBS": "1000000000"}
        body = json.dumps({"operation": "bench.noop", "params": {}, "priority": 7})
        send = sender(port, "/v1/jobs", body, {"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    else:
        argv = procs.gunicorn(str(procs.ROOT / ".venv/bin/python"), "bench.baselines.flask_bare:create_app()", port, 1)
        env |= {"BENCH_REDIS_URL": redis_url, "BENCH_BROKER_URL": redis_url, "BENCH_RESULT_URL": redis_url}
        send = sender(port, "/jobs", "", {})
    valgrind = ["valgrind", "--tool=callgrind", "--trace-children=yes",
                f"--callgrind-out-file={out_dir / 'cg.%p'}"]
    server = procs.start("web-under-callgrind", [*valgrind, *argv], env, work)
    try:
        deadline = time.monotonic() + 300
        while True:  # the interpreter's start under callgrind takes a minute or so
            try:
                send()
                break
            except (OSError, http.client.HTTPException):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        workers = procs.children(server.popen.pid)
        if len(workers) != 1:
            raise RuntimeError(f"{row}: {len(workers)} worker processes, not one")
        yield send, Callgrind(workers[0], out_dir)
    finally:
        server.stop()


def measure(requests: int, warm: int, rows: Sequence[str] = ()) -> dict[str, float]:
    """Instructions per request of each row's worker (`rows`: those named only), each on a Redis of its own."""
    counts: dict[str, float] = {}
    for row in ROWS:
        if rows and row not in rows:
            continue
        with tempfile.TemporaryDirectory(prefix="tb-web-instructions-") as work:
            redis = EmbeddedRedis(appendonly=False, data_dir=work).start()
            try:
                with worker_under_callgrind(row, f"redis://{redis.host}:{redis.port}/0", Path(work)) as (send, cg):
                    counts[row] = per_request(send, cg, requests, warm)
            finally:
                redis.stop()
    return counts


def main() -> None:
    command_line(__doc__ or "", ROWS, measure, requests=300, warm=100, counted="web worker instructions per request")


if __name__ == "__main__":
    main()
