"""Redis's instructions per submit, counted: the product's submits and the bare `apply_async` route, each sent
through its Flask app in this process (the same entrance, checks and scripts as over HTTP) to one Redis run under
valgrind's callgrind.

Usage: python -m bench.submit_instructions [--requests 2000] [--warm 200]

The dispatch row of `bench.run` compares rates on two shared cores, which move by a tenth between runs of one
machine and by more between machines; Redis's part of a submit is where the product spends more than the bare
route (a script of some twenty commands against one LPUSH). An instruction count of the product's rows is the same
from run to run to about half a per cent, so a change to the submit's scripts is judged by it; the bare route's, a
fortieth of theirs, moves by a few per cent. What still depends on time, and so a little on the machine's load:
the server's timer and the AOF's flush each second (the server runs at `hz 1` so that its timer, which fires more
often per request under valgrind's slowdown, weighs less), and the rate limit's grants, which last a second (a
slower run asks for more of them). Counted: Redis's own code and its libraries, every thread of it (the AOF's
writes into the kernel's buffers, not the kernel's work behind them, nor the sockets').

Printed, per request: the priority submit (the dispatch row's), the plain one, the one with an Idempotency-Key (all
three with fair shares on, as shipped), the bare route, and each product row's ratio to the bare route.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from tasks_backend.config import Settings
from tasks_backend.devtools.embedded import EmbeddedRedis, redis_server_binary

from .gate_drain import runtime_on

#: The row every other is compared with.
BARE = "bare apply_async route"

#: The product's rows, in the order printed.
ROWS = ("submit with a priority, fair shares on", "submit", "submit with an Idempotency-Key")

#: One request sent and checked accepted (a refused submit would be counted as a cheap one).
Send = Callable[[], None]


@dataclass
class Callgrind:
    """The instruction counter of a process running under callgrind: zeroed, then read by a dump."""

    pid: int
    out_dir: Path

    def zero(self) -> None:
        self._control("-z")

    def read(self) -> int:
        """Instructions since the last zero (callgrind writes them to a numbered dump file of this process's; the
        other processes it traces, a web server's master, write files of their own)."""
        mine = f"cg.{self.pid}.*"
        before = set(self.out_dir.glob(mine))
        self._control("-d")
        made = set(self.out_dir.glob(mine)) - before
        if len(made) != 1:
            raise RuntimeError(f"callgrind's dump made {len(made)} files in {self.out_dir}, not one")
        (dump,) = made
        found = re.search(r"^summary: (\d+)$", dump.read_text(), re.MULTILINE)
        if found is None:
            raise RuntimeError(f"callgrind wrote no summary line in {dump}")
        return int(found.group(1))

    def _control(self, flag: str) -> None:
        # callgrind_control exits 0 whatever happened: its "OK." is the only sign the command was carried out.
        done = subprocess.run(["callgrind_control", flag, str(self.pid)], capture_output=True, text=True)
        if "OK." not in done.stdout:
            raise RuntimeError(f"callgrind_control {flag} {self.pid} failed: {done.stdout}{done.stderr}")


@contextmanager
def redis_under_callgrind(work: Path) -> Iterator[tuple[EmbeddedRedis, Callgrind]]:
    """The embedded Redis (AOF on, as `bench.run` runs it) started through valgrind's callgrind."""
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench: {tool} is needed (apt-get install valgrind, or `make bench-instructions`)")
    out_dir = work / "callgrind"
    out_dir.mkdir()
    wrapper = work / "redis-server"
    wrapper.write_text("#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=" + str(out_dir / "cg.%p")
                       + f" {redis_server_binary()} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    (work / "data").mkdir()
    server = EmbeddedRedis(appendonly=True, data_dir=str(work / "data"), binary=str(wrapper), extra_args=["--hz", "1"])
    server.start(timeout_s=60)
    try:
        assert server.process is not None
        yield server, Callgrind(server.process.pid, out_dir)
    finally:
        server.stop()


def product_sends(url: str) -> dict[str, Send]:
    """The product's three submits as the bench's web load sends them, through the product's own app."""
    from adapters.app import create_app

    token = uuid.uuid4().hex
    # The slots as shipped, as the dispatch row's web server runs.
    runtime = runtime_on(url, Settings.dispatch_slots, tokens=f"bench:{token}")
    client = create_app(runtime=runtime).test_client()
    headers = {"Authorization": f"Bearer {token}"}

    def send(body: dict[str, Any], keyed: bool = False) -> Send:
        def one() -> None:
            extra = {"Idempotency-Key": uuid.uuid4().hex} if keyed else {}
            answer = client.post("/v1/jobs", json=body, headers={**headers, **extra})
            if answer.status_code != 202:
                raise RuntimeError(f"submit refused: {answer.status_code} {answer.get_data(as_text=True)}")
        return one

    noop: dict[str, Any] = {"operation": "bench.noop", "params": {}}
    sends = (send({**noop, "priority": 7}), send(noop), send(noop, keyed=True))
    return dict(zip(ROWS, sends, strict=True))


def bare_send(url: str) -> Send:
    """The bare `apply_async` route (`bench.baselines.flask_bare`), its broker, results and hashes on `url`."""
    from .baselines.flask_bare import create_app

    with mock.patch.dict(os.environ, {"BENCH_REDIS_URL": url, "BENCH_BROKER_URL": url, "BENCH_RESULT_URL": url}):
        client = create_app().test_client()

    def one() -> None:
        answer = client.post("/jobs")
        if answer.status_code != 202:
            raise RuntimeError(f"bare submit refused: {answer.status_code}")
    return one


def per_request(send: Send, counter: Callgrind, requests: int, warm: int) -> float:
    for _ in range(warm):
        send()
    counter.zero()
    for _ in range(requests):
        send()
    return counter.read() / requests


def measure(requests: int, warm: int, rows: Collection[str] = ()) -> dict[str, float]:
    """Instructions per request of each row (`rows`: those named only), the bare route's last, each row on a Redis
    of its own, as the dispatch row starts from an empty queue: a count depends on what the server went through
    before (its tables grow, its Lua heap is collected, an owner's queued jobs change what the gate does), so two
    counts compare when both runs made the same requests in the same order."""
    counts: dict[str, float] = {}
    for name in (*ROWS, BARE):
        if rows and name not in rows:
            continue
        with tempfile.TemporaryDirectory(prefix="tb-instructions-") as work, \
                redis_under_callgrind(Path(work)) as (server, counter):
            url = f"redis://{server.host}:{server.port}/0"
            send = bare_send(url) if name == BARE else product_sends(url)[name]
            counts[name] = per_request(send, counter, requests, warm)
    return counts


def report(counts: dict[str, float], counted: str = "Redis instructions per request") -> str:
    """The counts as a table, each against the bare route's."""
    bare, width = counts[BARE], len(counted) + 1
    lines = [f"{'row':<40} {counted:>{width}} {'vs bare':>8}"]
    for name, count in counts.items():
        lines.append(f"{name:<40} {count:>{width},.0f} {count / bare:>7.2f}x")
    return "\n".join(lines)


def command_line(doc: str, rows: Sequence[str], measure: Callable[[int, int, Sequence[str]], dict[str, float]], *,
                 requests: int, warm: int, counted: str) -> None:
    """An instruction count's command: its options, its measure of the rows asked for (all, by default), its table."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=requests, help=f"requests counted per row (default {requests})")
    parser.add_argument("--warm", type=int, default=warm, help=f"requests sent before counting (default {warm})")
    parser.add_argument("--row", action="append", default=[], choices=rows,
                        help="count this row only (repeatable; the bare route's name for the ratios)")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON instead of a table")
    args = parser.parse_args()
    counts = measure(args.requests, args.warm, args.row)
    print(json.dumps(counts) if args.json or BARE not in counts else report(counts, counted))


def main() -> None:
    command_line(__doc__ or "", (*ROWS, BARE), measure, requests=2000, warm=200,
                 counted="Redis instructions per request")


if __name__ == "__main__":
    main()
