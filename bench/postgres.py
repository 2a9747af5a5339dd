"""A throwaway PostgreSQL server for the A2A baseline's task store (Debian's `postgresql` package).

The server lives in a temporary directory on a free loopback port and is removed when stopped. As root
(`initdb` refuses root) it runs as the `postgres` user the package creates. Commits are not waited on
(`synchronous_commit=off`: the WAL is flushed within a fraction of a second), the durability the
product's Redis has with its AOF flushed every second, so neither side pays for more than the other.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tasks_backend.devtools.embedded import free_port

__all__ = ["Postgres"]

USER = "bench"


def _bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)),
                                       None)
    if not found:
        raise SystemExit(f"bench: {name} is needed (apt-get install postgresql, or `make bench-deps`)")
    return found


class Postgres:
    def __init__(self) -> None:
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="bench-pg-"))
        self.data = self.root / "data"
        self._as: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the server's `postgres` database, through asyncpg."""
        return f"postgresql+asyncpg://{USER}@127.0.0.1:{self.port}/postgres"

    def start(self, timeout_s: float = 60.0) -> Postgres:
        self._run(_bin("initdb"), "-D", str(self.data), "-U", USER, "--auth=trust", "-E", "UTF8")
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c synchronous_commit=off "
                   "-c max_connections=200")
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log"), "-o", options,
                  "-w", "-t", str(int(timeout_s)), "start")  # -w: until it takes connections
        return self

    def pid(self) -> int:
        """The postmaster's process id (its children are the server's backends)."""
        return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])

    def stop(self) -> None:
        if self.data.exists():
            self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, *argv: str, check: bool = True) -> None:
        proc = subprocess.run([*self._as, *argv], capture_output=True, text=True, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {proc.stderr.strip() or proc.stdout.strip()}")
