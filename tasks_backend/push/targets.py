"""Where outbound requests to caller-supplied URLs may go (webhooks, remote agents), and connections pinned there.

The guard allows only targets that resolve to global unicast addresses outside IANA's special-purpose registries
(`special_addresses`; an IPv6 form that only writes an IPv4 address is judged by that address) unless
`push_allow_private` is set. Checking a name and then letting the HTTP client resolve it again would let a DNS
answer that changes in between (rebinding) reach the private network, so every connection goes through
`connect_checked`: it resolves the name once, checks every address and connects only to one of those. TLS still
verifies the certificate against the host name (and sends it as SNI); the Host header stays the URL's host.
`PinnedBackend` puts this under httpx; `post_event` uses it for http.client.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx
from httpcore._backends.sync import SyncStream  # the stream SyncBackend wraps its sockets in

from ..errors import InvalidParams
from .special_addresses import allowed_target

#: A host's addresses for a port (numeric strings), in the order to try them: the one step tests may replace.
Resolver = Callable[[str, int], Sequence[str]]


class TargetRefused(InvalidParams):
    message = "The push notification URL is not allowed."


class TargetUnresolved(TargetRefused):
    """The host does not resolve, now: refused to whoever supplies the URL, a passing fault to a delivery or a
    remote call made later (DNS may answer again)."""


def system_resolve(host: str, port: int) -> list[str]:
    return list(dict.fromkeys(str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)))


def _allowed(address: str) -> bool:
    return allowed_target(ipaddress.ip_address(address.split("%", 1)[0]))


def parse_target(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an absolute http(s) URL without credentials in it, or `TargetRefused`."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetRefused("The push notification URL must be an absolute http or https URL.")
    if parts.username or parts.password:
        raise TargetRefused("Put credentials in `authentication`, not in the URL.")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise TargetRefused("The push notification URL has an invalid port.") from exc
    return parts.scheme, parts.hostname, port


def checked_addresses(host: str, port: int, allow_private: bool, resolve: Resolver = system_resolve) -> list[str]:
    """Every address `host` resolves to (resolved once), or `TargetRefused` if any of them is not allowed."""
    try:
        addresses = list(resolve(host, port))
    except (OSError, UnicodeError) as exc:
        raise TargetUnresolved("The push notification host does not resolve.") from exc
    if not addresses:
        raise TargetUnresolved("The push notification host does not resolve.")
    if not allow_private and not all(_allowed(a) for a in addresses):
        raise TargetRefused("The push notification URL points at a loopback, link-local, private or other "
                            "special-purpose address; the server is not configured to allow that.")
    return addresses


def resolve_target(url: str, allow_private: bool, resolve: Resolver = system_resolve) -> tuple[str, str, int, str]:
    """(scheme, host, port, first address) for an allowed URL, or `TargetRefused`: the check made when a URL is
    given, for a clear error to whoever gave it. Connections check again (`connect_checked`)."""
    scheme, host, port = parse_target(url)
    return scheme, host, port, checked_addresses(host, port, allow_private, resolve)[0]


def connect_checked(host: str, port: int, *, allow_private: bool, timeout: float | None,
                    source: tuple[str, int] | None = None, resolve: Resolver = system_resolve) -> socket.socket:
    """A socket connected to the first of `host`'s checked addresses that answers (`timeout` for each);
    `TargetRefused` if the guard refuses the host, else the last address's `OSError`."""
    error: OSError | None = None
    for address in checked_addresses(host, port, allow_private, resolve):
        try:
            return socket.create_connection((address, port), timeout, source)  # numeric: no second lookup
        except OSError as exc:
            error = exc
    assert error is not None
    raise error


class PinnedBackend(httpcore.SyncBackend):
    """httpcore's network backend with every TCP connection made by `connect_checked`: httpcore asks for the
    URL's host and port, then starts TLS with the host name itself."""

    def __init__(self, allow_private: bool, resolve: Resolver = system_resolve) -> None:
        self.allow_private, self.resolve = allow_private, resolve

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        source = None if local_address is None else (local_address, 0)
        try:
            sock = connect_checked(host, port, allow_private=self.allow_private, timeout=timeout, source=source,
                                   resolve=self.resolve)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        for option in socket_options or ():
            sock.setsockopt(*option)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return SyncStream(sock)


class PinnedTransport(httpx.HTTPTransport):
    """httpx's transport over a connection pool whose connections come from `PinnedBackend`; no proxy (a proxy
    would resolve the name itself)."""

    def __init__(self, allow_private: bool, resolve: Resolver = system_resolve) -> None:
        context = httpx.create_ssl_context()  # verifies certificates and host names; honours SSL_CERT_FILE
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=20)  # httpx's own defaults
        super().__init__(verify=context, limits=limits)
        if not isinstance(getattr(self, "_pool", None), httpcore.ConnectionPool):  # never fall back unpinned
            raise RuntimeError("httpx.HTTPTransport no longer keeps its pool in `_pool`: connections cannot be pinned")
        self._pool = httpcore.ConnectionPool(
            ssl_context=context, max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections, keepalive_expiry=limits.keepalive_expiry,
            network_backend=PinnedBackend(allow_private, resolve))
