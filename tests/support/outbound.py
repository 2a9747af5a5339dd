"""For tests of connections to caller-supplied URLs: a resolver that rebinds, a watch on the addresses sockets
connect to, a JSON-RPC endpoint on loopback (plain or TLS) and a certificate authority made for the test.

`watch_connects` sees every `connect` of the watching thread through an audit hook (real sockets, nothing
replaced) and refuses the ones that would leave this machine, so a test can show where a connection went
without sending a packet to the address a fake DNS answer named.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import ssl
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

#: A global unicast address the guard allows; connections to it are refused by `watch_connects`.
PUBLIC = "8.8.8.8"


class Rebinding:
    """A DNS that answers `first` to the first lookup and loopback to every later one."""

    def __init__(self, first: str = PUBLIC, then: str = "127.0.0.1") -> None:
        self.first, self.then = first, then
        self.lookups: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append((host, port))
        return [self.first if len(self.lookups) == 1 else self.then]


class Fixed:
    """A DNS that answers every lookup of a name with loopback, and counts them."""

    def __init__(self) -> None:
        self.lookups: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append((host, port))
        return ["127.0.0.1"]


_watching: dict[int, list[tuple[str, int]]] = {}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event != "socket.connect" or (seen := _watching.get(threading.get_ident())) is None:
        return
    address = args[1]
    if not isinstance(address, tuple):
        return
    host, port = str(address[0]), int(address[1])
    seen.append((host, port))
    if not ipaddress.ip_address(host.split("%", 1)[0]).is_loopback:
        raise ConnectionRefusedError(f"the test keeps connections on this machine ({host}:{port})")


sys.addaudithook(_audit)


@contextlib.contextmanager
def watch_connects() -> Iterator[list[tuple[str, int]]]:
    """The (address, port) of every connect this thread makes inside the block; non-loopback ones are refused."""
    seen: list[tuple[str, int]] = []
    _watching[threading.get_ident()] = seen
    try:
        yield seen
    finally:
        del _watching[threading.get_ident()]


class Authority:
    """A CA made for the test, and a server certificate from it for `names` (and for 127.0.0.1, so that
    checking the certificate against the address instead of the name would pass)."""

    def __init__(self, tmp: Path, names: list[str]) -> None:
        now = datetime.datetime.now(datetime.UTC)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tasks-backend test CA")])
        ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
              .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
              .not_valid_after(now + datetime.timedelta(days=1))
              .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
              .sign(ca_key, hashes.SHA256()))
        key = ec.generate_private_key(ec.SECP256R1())
        alt = [*(x509.DNSName(n) for n in names), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        leaf = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
                .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName(alt), critical=False)
                .sign(ca_key, hashes.SHA256()))
        self.ca_file = tmp / "ca.pem"
        self.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        chain = tmp / "server.pem"
        chain.write_bytes(leaf.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        self.server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.server_context.load_cert_chain(chain)


class JsonEndpoint:
    """An HTTP server on loopback answering each JSON-RPC POST with `{"ok": true}` (TLS when given a context);
    `hosts` holds each request's Host header, `sni` each TLS handshake's server name, `connections` the count."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.hosts: list[str] = []
        self.sni: list[str | None] = []
        self.connections = 0
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                endpoint.connections += 1
                super().setup()

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                endpoint.hosts.append(self.headers.get("Host", ""))
                out = json.dumps({"jsonrpc": "2.0", "id": body.get("id"), "result": {"ok": True}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        if tls is not None:
            tls.sni_callback = lambda sock, name, ctx: self.sni.append(name)
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
