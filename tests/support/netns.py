"""A private network of hosts for tests: Linux network namespaces joined to a bridge by veth pairs.

Each host is a network namespace with one interface on a /24 of its own (10.R.S.0/24, one nobody on this
machine uses). The bridge, in the root namespace, holds the network's first address: the harness's own
servers (Redis, the deduplicating downstream, the balancer callers use) listen there, so every host reaches
them and the test reaches every host. Cutting a host takes the bridge side of its link down: from then on
its packets, in both directions, vanish without an error to anyone, as when a switch port fails. Taking
the link up again lets them through, and TCP carries on where it stopped.

Names carry the creating process's id and a random tag, so runs at the same time never meet; `close`
removes everything, and a run killed outright leaves namespaces that the next run removes. Needs root
(CAP_NET_ADMIN) and iproute2 (`make test` installs it when missing).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import re
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PREFIX = "tbnet"
_NAME = re.compile(rf"^{PREFIX}-(\d+)-([0-9a-f]{{4}})-\w+")


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")
    return done.stdout


def unavailable() -> str | None:
    """Why this machine cannot build the network (None when it can)."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed (make test installs it: mk/netns.mk)"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN)"
    return None


def remove_stale() -> None:
    """Remove what runs killed outright left behind (their creating process is gone)."""
    for line in _ip("netns", "list").splitlines():
        name = line.split()[0] if line.strip() else ""
        found = _NAME.match(name)
        if found and not Path(f"/proc/{found.group(1)}").exists():
            with contextlib.suppress(RuntimeError):
                _ip("netns", "delete", name)
            with contextlib.suppress(RuntimeError):
                _ip("link", "delete", f"tb{found.group(2)}br")


def _unused_subnet() -> ipaddress.IPv4Network:
    taken = _ip("-4", "-o", "addr", "show") + _ip("-4", "route", "show", "table", "all")
    rng = random.SystemRandom()
    for _ in range(100):
        net = ipaddress.IPv4Network(f"10.{rng.randint(100, 250)}.{rng.randint(0, 255)}.0/24")
        if f"10.{net.network_address.packed[1]}.{net.network_address.packed[2]}." not in taken:
            return net
    raise RuntimeError("no unused 10.x.y.0/24 network found")


@dataclass(frozen=True)
class Host:
    name: str
    netns: str
    address: str
    link: str  # the bridge side of its veth pair, in the root namespace

    @property
    def prefix(self) -> list[str]:
        """Put before a command to run it on this host."""
        return ["ip", "netns", "exec", self.netns]

    def runs(self, pid: int) -> bool:
        """Whether process `pid` lives in this host's network namespace."""
        try:
            return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{self.netns}").st_ino
        except FileNotFoundError:
            return False


class Lan:
    """The bridge and its hosts; use as a context manager, or call `close`."""

    def __init__(self) -> None:
        remove_stale()
        self.tag = secrets.token_hex(2)
        self.network = _unused_subnet()
        addresses = self.network.hosts()
        self.address = str(next(addresses))  # the bridge's: the harness's servers listen here
        self._free = addresses
        self.bridge = f"tb{self.tag}br"
        self.hosts: dict[str, Host] = {}
        _ip("link", "add", self.bridge, "type", "bridge")
        try:
            _ip("addr", "add", f"{self.address}/{self.network.prefixlen}", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Lan:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def add_host(self, name: str) -> Host:
        """A new namespace `name` (a few letters) with an address on this network and a default route."""
        host = Host(name, f"{PREFIX}-{os.getpid()}-{self.tag}-{name}", str(next(self._free)), f"tb{self.tag}{name}")
        inner = f"{host.link}p"
        _ip("netns", "add", host.netns)
        self.hosts[name] = host  # from here on, `close` removes it
        _ip("link", "add", host.link, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", host.netns)
        _ip("link", "set", host.link, "master", self.bridge, "up")
        for args in (("addr", "add", f"{host.address}/{self.network.prefixlen}", "dev", inner),
                     ("link", "set", inner, "up"), ("link", "set", "lo", "up"),
                     ("route", "add", "default", "via", self.address)):
            _ip("-n", host.netns, *args)
        return host

    def cut(self, host: Host) -> None:
        """Drop every packet to and from `host` from now on, silently."""
        _ip("link", "set", host.link, "down")

    def heal(self, host: Host) -> None:
        _ip("link", "set", host.link, "up")

    def close(self) -> None:
        """Remove the namespaces (their veth pairs go with them) and the bridge. Stop their processes first."""
        for host in self.hosts.values():
            with contextlib.suppress(RuntimeError):
                _ip("netns", "delete", host.netns)
        self.hosts.clear()
        with contextlib.suppress(RuntimeError):
            _ip("link", "delete", self.bridge)
