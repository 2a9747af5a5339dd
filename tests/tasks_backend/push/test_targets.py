"""Connections to caller-supplied URLs are pinned: the name is resolved once per connection, every address it
gave is checked, and the socket goes to one of those; TLS still checks the certificate against the name. Real
sockets on loopback; only the name lookup is the test's (the resolver the connection is made with)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from tasks_backend.push.targets import TargetRefused, connect_checked
from tasks_backend.push.webhook import post_event
from tests.support.outbound import PUBLIC, Authority, Fixed, JsonEndpoint, Rebinding, watch_connects


@pytest.fixture
def endpoint() -> Iterator[JsonEndpoint]:
    e = JsonEndpoint()
    yield e
    e.close()


def test_a_webhook_name_that_rebinds_to_loopback_never_reaches_it(endpoint: JsonEndpoint) -> None:
    dns = Rebinding()
    config = {"url": f"http://hooks.test:{endpoint.port}/hook"}
    with watch_connects() as connects:
        with pytest.raises(ConnectionRefusedError):  # it went to the address that was checked
            post_event(config, {}, allow_private=False, timeout_s=2.0, resolve=dns)
        with pytest.raises(TargetRefused):
            post_event(config, {}, allow_private=False, timeout_s=2.0, resolve=dns)
    assert connects == [(PUBLIC, endpoint.port)] and len(dns.lookups) == 2 and endpoint.connections == 0


def test_every_address_a_name_resolves_to_is_checked_and_only_those_are_tried(endpoint: JsonEndpoint) -> None:
    with watch_connects() as connects, pytest.raises(TargetRefused):
        connect_checked("hooks.test", endpoint.port, allow_private=False, timeout=2.0,
                        resolve=lambda host, port: [PUBLIC, "127.0.0.1"])
    assert connects == []
    with watch_connects() as connects:  # the first address does not answer: the next checked one is used
        connect_checked("hooks.test", endpoint.port, allow_private=True, timeout=2.0,
                        resolve=lambda host, port: [PUBLIC, "127.0.0.1"]).close()
    assert connects == [(PUBLIC, endpoint.port), ("127.0.0.1", endpoint.port)]


def test_a_webhook_to_loopback_is_delivered_through_the_pinned_connection_when_allowed(
        endpoint: JsonEndpoint) -> None:
    dns = Fixed()
    with watch_connects() as connects:
        assert post_event({"url": f"http://hooks.test:{endpoint.port}/hook"}, {}, allow_private=True,
                          timeout_s=2.0, resolve=dns) == 200
    assert connects == [("127.0.0.1", endpoint.port)] and dns.lookups == [("hooks.test", endpoint.port)]
    assert endpoint.hosts == [f"hooks.test:{endpoint.port}"]


def test_https_webhooks_are_checked_against_the_host_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    authority = Authority(tmp_path, ["hooks.test"])
    monkeypatch.setenv("SSL_CERT_FILE", str(authority.ca_file))
    endpoint = JsonEndpoint(authority.server_context)
    try:
        assert post_event({"url": f"https://hooks.test:{endpoint.port}/hook"}, {}, allow_private=True,
                          timeout_s=5.0, resolve=Fixed()) == 200
        # The same address, a name the certificate does not hold (it holds 127.0.0.1): refused.
        with pytest.raises(ssl.SSLCertVerificationError):
            post_event({"url": f"https://other.test:{endpoint.port}/hook"}, {}, allow_private=True,
                       timeout_s=5.0, resolve=Fixed())
    finally:
        endpoint.close()
    assert endpoint.sni == ["hooks.test", "other.test"] and endpoint.hosts == [f"hooks.test:{endpoint.port}"]
