"""The load generator: wrk, driven by `lua/load.lua`, bounded in time and aimed at loopback only."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SCRIPT = Path(__file__).with_name("lua") / "load.lua"


@dataclass(frozen=True)
class Run:
    """What one wrk run measured."""

    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: int
    jobs: int
    failures: int

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.seconds


@dataclass
class Load:
    """One kind of traffic: a fixed request (`%s` = a random id from `ids`), or a submit-and-poll flow."""

    url: str
    method: str = "GET"
    path: str = "/"
    body: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    ids: Path | None = None
    flow: dict[str, str] | None = None
    #: A header that gets a value never sent before on every request (an Idempotency-Key).
    unique_header: str | None = None

    def __post_init__(self) -> None:
        host = self.url.split("://", 1)[-1].split(":", 1)[0]
        if host not in ("127.0.0.1", "localhost"):
            raise ValueError("the load generator only targets loopback")

    def env(self) -> dict[str, str]:
        env = {"BENCH_MODE": "flow" if self.flow else "fixed", "BENCH_METHOD": self.method, "BENCH_PATH": self.path,
               "BENCH_HEADERS": "|".join(f"{k}: {v}" for k, v in self.headers.items())}
        if self.body is not None:
            env["BENCH_BODY"] = self.body
        if self.ids is not None:
            env["BENCH_IDS"] = str(self.ids)
        if self.unique_header is not None:
            env["BENCH_UNIQUE_HEADER"] = self.unique_header
        env.update(self.flow or {})
        return env


def wrk_binary() -> str:
    found = shutil.which("wrk")
    if not found:
        raise SystemExit("wrk is not installed: `apt-get install wrk` (Debian) or `make bench`, which installs it")
    return found


def run(load: Load, *, seconds: float, connections: int, threads: int) -> Run:
    if load.flow:
        threads = connections  # one connection per thread: the script's state is per thread
    argv = [wrk_binary(), "-t", str(threads), "-c", str(connections), "-d", f"{max(1, round(seconds))}s",
            "--timeout", "10s", "-s", str(SCRIPT), load.url]
    proc = subprocess.run(argv, env={**os.environ, **load.env()}, capture_output=True, text=True,
                          timeout=seconds + 60, check=False)
    line = next((x for x in reversed(proc.stdout.splitlines()) if x.startswith("{")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout[-500:]}")
    data = json.loads(line)
    return Run(requests=data["requests"], seconds=data["duration_us"] / 1e6, p50_ms=data["p50_us"] / 1000,
               p99_ms=data["p99_us"] / 1000, errors=data["errors"] + data["status_errors"], jobs=data["jobs"],
               failures=data["failures"])
