"""Which remotes a job may call and with which credentials, and what a remote that lost a task reads as: the
credentials come from settings only (longest URL prefix), a loopback URL is refused unless private addresses are
allowed, and a task the remote does not know (over real HTTP, this project as the remote) is a failed task."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tasks_backend.config import Settings
from tasks_backend.push.targets import TargetRefused
from tasks_backend.remote.access import RemoteChannel, RemoteError, authorization
from tasks_backend.remote.client import Remotes
from tests.conftest import Serve, make_settings
from tests.support.outbound import PUBLIC, Authority, Fixed, JsonEndpoint, Rebinding, watch_connects

CREDENTIALS = {"https://agents.example/": "Bearer general", "https://agents.example/billing/": "Bearer billing"}


def test_credentials_come_from_settings_by_the_longest_prefix() -> None:
    settings = Settings.from_env({"TASKS_BACKEND_REMOTE_CREDENTIALS": json.dumps(CREDENTIALS)})
    assert authorization(settings, "https://agents.example/billing/a2a") == "Bearer billing"
    assert authorization(settings, "https://agents.example/mcp") == "Bearer general"
    assert authorization(settings, "https://other.example/mcp") is None


@pytest.mark.parametrize("raw", ["not json", '["a"]', '{"https://a.example/": 5}'])
def test_malformed_credentials_are_refused_at_start(raw: str) -> None:
    with pytest.raises(ValueError, match="TASKS_BACKEND_REMOTE_CREDENTIALS"):
        Settings.from_env({"TASKS_BACKEND_REMOTE_CREDENTIALS": raw})


def test_a_loopback_remote_is_refused_unless_private_addresses_are_allowed() -> None:
    with pytest.raises(TargetRefused):
        Remotes(Settings()).guard("http://127.0.0.1:9/mcp")
    with pytest.raises(TargetRefused):
        Remotes(Settings()).guard("file:///etc/passwd")
    Remotes(Settings(push_allow_private=True)).guard("http://127.0.0.1:9/mcp")


@pytest.mark.parametrize("ref", [
    {"protocol": "mcp-2026", "path": "/mcp", "pollMs": 1000},
    {"protocol": "a2a", "path": "/a2a", "pollMs": 1000},
])
def test_a_task_the_remote_does_not_know_is_failed(redis_base: str, serve: Serve, ref: dict[str, object]) -> None:
    settings = make_settings(redis_base, push_allow_private=True)
    url = serve(settings) + str(ref.pop("path"))
    remotes = Remotes(settings.with_(remote_credentials=(("http://127.0.0.1:", "Bearer bob-token"),)))
    status = remotes.get({**ref, "url": url, "taskId": "5d0c2b57-5a5b-4a55-9d8e-000000000000"})
    assert status.state == "failed" and "no longer knows" in str(status.message)


# -- connections pinned to the checked address ---------------------------------------------------------------
@pytest.fixture
def endpoint() -> Iterator[JsonEndpoint]:
    e = JsonEndpoint()
    yield e
    e.close()


def test_a_name_that_rebinds_to_loopback_never_reaches_it(endpoint: JsonEndpoint) -> None:
    dns = Rebinding()
    channel = RemoteChannel(Settings(remote_timeout_s=2.0), resolve=dns)
    url = f"http://agent.test:{endpoint.port}/mcp"
    try:
        with watch_connects() as connects:
            with pytest.raises(RemoteError, match="unreachable"):  # it went to the address that was checked
                channel.call(url, "ping", {})
            with pytest.raises(TargetRefused):  # the next connection asks again and is refused
                channel.call(url, "ping", {})
    finally:
        channel.close()
    assert connects == [(PUBLIC, endpoint.port)]
    assert dns.lookups == [("agent.test", endpoint.port)] * 2 and endpoint.connections == 0


def test_a_remote_on_loopback_is_reached_through_the_pinned_connection_when_allowed(endpoint: JsonEndpoint) -> None:
    dns = Fixed()
    url = f"http://agent.test:{endpoint.port}/a2a"
    refused = RemoteChannel(Settings(), resolve=dns)
    with pytest.raises(TargetRefused):
        refused.call(url, "ping", {})
    refused.close()
    assert endpoint.connections == 0
    channel = RemoteChannel(Settings(push_allow_private=True), resolve=dns)
    try:
        with watch_connects() as connects:
            assert channel.call(url, "ping", {})[0] == {"ok": True}
            assert channel.call(url, "ping", {})[0] == {"ok": True}
    finally:
        channel.close()
    assert connects == [("127.0.0.1", endpoint.port)] * 2 and len(dns.lookups) == 3  # one a connection
    assert endpoint.hosts == [f"agent.test:{endpoint.port}"] * 2


def test_https_remotes_are_checked_against_the_host_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    authority = Authority(tmp_path, ["agent.test"])
    monkeypatch.setenv("SSL_CERT_FILE", str(authority.ca_file))
    endpoint = JsonEndpoint(authority.server_context)
    channel = RemoteChannel(Settings(push_allow_private=True), resolve=Fixed())
    try:
        assert channel.call(f"https://agent.test:{endpoint.port}/mcp", "ping", {})[0] == {"ok": True}
        # The same address, a name the certificate does not hold (it holds 127.0.0.1): refused.
        with pytest.raises(RemoteError, match="unreachable") as refused:
            channel.call(f"https://other.test:{endpoint.port}/mcp", "ping", {})
    finally:
        channel.close()
        endpoint.close()
    assert "CERTIFICATE_VERIFY_FAILED" in repr(refused.value.__cause__)
    assert endpoint.sni == ["agent.test", "other.test"] and endpoint.hosts == [f"agent.test:{endpoint.port}"]


def test_a_proxy_from_the_environment_is_not_used(endpoint: JsonEndpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy would look the name up itself, past the guard."""
    proxy = JsonEndpoint()
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("ALL_PROXY", f"http://127.0.0.1:{proxy.port}")
    channel = RemoteChannel(Settings(push_allow_private=True), resolve=Fixed())
    try:
        assert channel.call(f"http://agent.test:{endpoint.port}/mcp", "ping", {})[0] == {"ok": True}
    finally:
        channel.close()
        proxy.close()
    assert endpoint.hosts == [f"agent.test:{endpoint.port}"] and proxy.connections == 0


class _Outage:
    """A DNS that fails (as `getaddrinfo` does when no server answers) until `back`, then answers loopback."""

    def __init__(self) -> None:
        self.back = False

    def __call__(self, host: str, port: int) -> list[str]:
        if not self.back:
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return ["127.0.0.1"]


def test_a_host_that_does_not_resolve_for_a_while_is_unreachable_not_refused(endpoint: JsonEndpoint) -> None:
    """A job waiting on a remote looks again after a fault it can outlive (`RemoteError`: parked, polled later);
    a refusal (`TargetRefused`) would fail it for good over a DNS outage."""
    dns = _Outage()
    url = f"http://agent.test:{endpoint.port}/a2a"
    channel = RemoteChannel(Settings(push_allow_private=True), resolve=dns)
    try:
        for attempt in (lambda: channel.guard(url), lambda: channel.call(url, "ping", {}),
                        lambda: channel.send(url, {"method": "ping"}, {})):
            with pytest.raises(RemoteError, match="does not resolve"):
                attempt()
        dns.back = True
        channel.guard(url)
        assert channel.call(url, "ping", {})[0] == {"ok": True}
    finally:
        channel.close()
