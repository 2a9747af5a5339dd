"""A Redis primary, one replica and three Sentinels on loopback ports, as a test's own processes.

The Sentinels are Debian's `redis-sentinel` (mk/sentinel.mk installs it); the primary and the replica are
the same redis-server the other tests use. Sentinel is tuned to notice a dead primary within a second
(`down-after-milliseconds`), so a failover takes a few seconds instead of Debian's default half minute.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from tasks_backend.devtools.embedded import free_port, redis_server_binary
from tasks_backend.serving.processes import die_with_parent
from tasks_backend.store.sentinel import sentinel_url
from tests.conftest import wait_until

SERVICE = "tbtest"
DOWN_AFTER_MS = 1000


def sentinel_binary() -> str:
    found = shutil.which("redis-sentinel")
    if not found:
        raise RuntimeError("redis-sentinel is needed: `make test` installs Debian's redis-sentinel package")
    return found


@dataclass
class Server:
    name: str
    port: int
    argv: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        preexec_fn=die_with_parent)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2, socket_timeout=1)

        def up() -> bool:
            assert self.process is not None and self.process.poll() is None, self.tail()
            with contextlib.suppress(redis.ConnectionError, redis.exceptions.BusyLoadingError):
                return bool(client.ping())
            return False

        wait_until(up, 10, message=f"{self.name} to answer")
        client.close()

    def info(self) -> dict[str, Any]:
        """This server's INFO replication section."""
        with redis.Redis(port=self.port, socket_timeout=1, decode_responses=True) as client:
            return dict(client.info("replication"))

    def replicas_online(self) -> int:
        """How many replicas hold this server's data and follow its writes."""
        info = self.info()
        return sum(1 for i in range(int(info.get("connected_slaves", 0)))
                   if info.get(f"slave{i}", {}).get("state") == "online")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, sig)
            if sig == signal.SIGKILL:
                self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""


class ReplicationLink:
    """A TCP relay the replica reaches its primary through. `hold()` makes it drop what the primary sends
    (the replica's acknowledgements still go through, so the link looks up): the replica falls behind, as
    one does when the primary dies before its last writes left it."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.held = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, name="replication-link", daemon=True).start()

    def hold(self) -> None:
        self.held.set()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                replica, _ = self.listener.accept()
                try:
                    primary = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=2)
                except OSError:
                    replica.close()
                    continue
                primary.settimeout(None)
                self.sockets += [replica, primary]
                threading.Thread(target=self._pump, args=(primary, replica, True), daemon=True).start()
                threading.Thread(target=self._pump, args=(replica, primary, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_primary: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if not (from_primary and self.held.is_set()):
                    sink.sendall(data)
        for sock in (source, sink):  # one side gone: the other sees the link drop
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        for sock in [self.listener, *self.sockets]:
            with contextlib.suppress(OSError):
                sock.close()


@dataclass
class SentinelGroup:
    """The primary (`servers[0]` at first), the replica and three Sentinels watching `SERVICE`.

    `linked`: the replica reaches the primary through a `ReplicationLink` (`self.link`). Sentinel then
    sees a replica of another address than the primary's, which it would set right after its failover
    timeout: that timeout is a minute then, longer than such a test."""

    root: Path
    linked: bool = False
    servers: list[Server] = field(default_factory=list)
    sentinels: list[Server] = field(default_factory=list)
    link: ReplicationLink | None = None

    def start(self) -> SentinelGroup:
        primary_port, replica_port = free_port(), free_port()
        upstream = primary_port
        if self.linked:
            self.link = ReplicationLink(primary_port)
            upstream = self.link.port
        for name, port, extra in (("primary", primary_port, []),
                                  ("replica", replica_port, ["--replicaof", "127.0.0.1", str(upstream)])):
            data = self.root / name
            data.mkdir(parents=True)
            argv = [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
                    "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction",
                    "--logfile", str(data / "redis.log"), *extra]
            server = Server(name, port, argv, data / "redis.log")
            self.servers.append(server)
            server.start()
        for i in range(3):
            port = free_port()
            data = self.root / f"sentinel{i}"
            data.mkdir(parents=True)
            conf = data / "sentinel.conf"  # Sentinel rewrites its file: one each, in the test's directory
            conf.write_text("\n".join([
                f"port {port}", "bind 127.0.0.1", "daemonize no", "protected-mode no", f"dir {data}",
                f"logfile {data / 'sentinel.log'}",
                f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} 2",
                f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
                f"sentinel failover-timeout {SERVICE} {60_000 if self.linked else 10_000}",
                f"sentinel parallel-syncs {SERVICE} 1", ""]))
            sentinel = Server(f"sentinel{i}", port, [sentinel_binary(), str(conf)], data / "sentinel.log")
            self.sentinels.append(sentinel)
            sentinel.start()
        wait_until(self._settled, 30, interval=0.1, message="the Sentinels to see the primary, the replica and "
                                                            "each other")
        return self

    def url(self, db: int = 0) -> str:
        return sentinel_url([f"127.0.0.1:{s.port}" for s in self.sentinels], db)

    @property
    def addresses(self) -> str:
        """`TASKS_BACKEND_REDIS_SENTINELS`."""
        return ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)

    def _ask(self, sentinel: Server, *command: Any) -> Any:
        with redis.Redis(port=sentinel.port, socket_timeout=1, decode_responses=True) as client:
            return client.execute_command(*command)

    def _answered(self, sentinel: Server) -> bool:
        """The Sentinel holds its primary up and has no PING to it unanswered (`last-ping-sent` is 0)."""
        with contextlib.suppress(redis.RedisError):
            state = self._ask(sentinel, "SENTINEL", "MASTER", SERVICE)
            return bool(state["flags"] == "master" and int(state["last-ping-sent"]) == 0)
        return False

    def _settled(self) -> bool:
        """Every Sentinel knows the primary, the other two and a replica in sync; the replica is linked."""
        for sentinel in self.sentinels:
            state = self._ask(sentinel, "SENTINEL", "MASTER", SERVICE)
            if int(state["num-other-sentinels"]) != 2 or int(state["num-slaves"]) != 1:
                return False
            replicas = self._ask(sentinel, "SENTINEL", "REPLICAS", SERVICE)
            if not replicas or "s_down" in replicas[0]["flags"] or replicas[0]["master-link-status"] != "ok":
                return False
        return True

    def primary_port(self) -> int:
        """The primary's port as the first Sentinel that answers names it."""
        for sentinel in self.sentinels:
            with contextlib.suppress(redis.RedisError):
                _host, port = self._ask(sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
                return int(port)
        raise AssertionError("no Sentinel answers")

    def replica_port(self) -> int:
        primary = self.primary_port()
        return next(s.port for s in self.servers if s.port != primary)

    def server_on(self, port: int) -> Server:
        return next(s for s in self.servers if s.port == port)

    def kill_primary(self) -> int:
        """SIGKILL the current primary; its port."""
        port = self.primary_port()
        self.server_on(port).kill()
        return port

    def wait_promoted(self, old_port: int, timeout: float = 30) -> int:
        """Wait until every Sentinel names a new primary that answers as one, and has had its answer to a
        PING since the switch; its port.

        A Sentinel that switches starts a new link whose first PING must be answered within
        `down-after-milliseconds`, or it flags the new primary down and may fail over again at once (on a
        busy machine it did, promoting the old primary just restarted with stale data). Starting the old
        primary again only after that first answer leaves that second failover no candidate."""
        def promoted() -> int | None:
            ports = set()
            for sentinel in self.sentinels:
                with contextlib.suppress(redis.RedisError):
                    ports.add(int(self._ask(sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)[1]))
            if len(ports) != 1 or old_port in ports:
                return None
            port = ports.pop()
            with contextlib.suppress(redis.RedisError), redis.Redis(port=port, socket_timeout=1) as client:
                if client.info("replication")["role"] == "master" and all(map(self._answered, self.sentinels)):
                    return port
            return None

        return int(wait_until(promoted, timeout, interval=0.1, message="a replica to be promoted"))

    def logs(self) -> str:
        return "\n".join(f"--- {s.name}\n{s.tail()}" for s in [*self.servers, *self.sentinels])

    def stop(self) -> None:
        for server in [*self.sentinels, *self.servers]:
            server.stop()
        if self.link is not None:
            self.link.close()
