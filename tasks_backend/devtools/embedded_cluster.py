"""A three-primary Redis Cluster on loopback ports, built by hand (ADDSLOTS, MEET), for tests and benchmarks.

The nodes refuse a command whose declared keys span slots (CROSSSLOT) and a script that touches a key
served by another node; redis-py refuses a cross-slot command or transaction before sending it.
"""

from __future__ import annotations

import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from .embedded import EmbeddedRedis, free_port

SLOTS = 16384


def cluster_port() -> int:
    """A free port whose cluster bus port (10000 higher, so at most 55535) is free too."""
    while True:
        port = free_port()
        if port <= 55535:
            with socket.socket() as bus:
                try:
                    bus.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            return port


@dataclass
class LocalCluster:
    primaries: int = 3
    #: How long a node may be unreachable before the others mark it failed (and the cluster down).
    node_timeout_ms: int = 5000
    nodes: list[EmbeddedRedis] = field(default_factory=list)

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self, timeout_s: float = 30.0) -> LocalCluster:
        """Start the nodes, give each a third of the slots, introduce them, and wait until all agree."""
        options = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                   "--cluster-node-timeout", str(self.node_timeout_ms))
        self.nodes = [EmbeddedRedis(port=cluster_port(), appendonly=False, extra_args=options)
                      for _ in range(self.primaries)]
        try:
            for node in self.nodes:
                node.start()
            clients = [redis.Redis(port=n.port, decode_responses=True) for n in self.nodes]
            step = SLOTS // self.primaries
            for i, client in enumerate(clients):
                end = SLOTS if i == self.primaries - 1 else (i + 1) * step
                client.cluster("ADDSLOTS", *range(i * step, end))
            for node in self.nodes[1:]:
                clients[0].cluster("MEET", "127.0.0.1", node.port)
            self._wait_ready(clients, timeout_s)
        except BaseException as exc:
            logs = [(Path(n.data_dir) / "redis.log") for n in self.nodes]
            tails = "\n".join(f"{p}: {p.read_text()[-600:]}" for p in logs if p.exists())
            self.stop()
            raise RuntimeError(f"the cluster did not start: {exc}\n{tails}") from exc
        return self

    def _wait_ready(self, clients: list[redis.Redis], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            infos = [c.cluster("INFO") for c in clients]
            if all(i["cluster_state"] == "ok" and int(i["cluster_known_nodes"]) == self.primaries for i in infos):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not form: {infos}")
            time.sleep(0.05)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
            shutil.rmtree(node.data_dir, ignore_errors=True)
