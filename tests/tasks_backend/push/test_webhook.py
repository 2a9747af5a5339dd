"""What a push config may hold, and which webhook targets the guard allows (no network needed:
literal addresses resolve without DNS)."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

import pytest

from adapters.a2a.push import normalize_config
from tasks_backend.errors import InvalidParams
from tasks_backend.push.special_addresses import SPECIAL_PURPOSE
from tasks_backend.push.targets import TargetRefused, resolve_target


# -- the guard ------------------------------------------------------------------------------------
@pytest.mark.parametrize("url", [
    "http://127.0.0.1/h", "http://localhost:8080/h", "http://10.0.0.5/h", "http://192.168.1.1/h",
    "http://172.16.3.4/h", "http://169.254.169.254/latest/meta-data", "http://[::1]/h", "http://[fe80::1]/h",
    "http://[::ffff:127.0.0.1]/h", "http://100.64.0.1/h", "http://0.0.0.0/h", "http://224.0.0.1/h",
    "http://[fd00::1]/h",
])
def test_guard_refuses_loopback_link_local_and_private_targets(url: str) -> None:
    with pytest.raises(TargetRefused):
        resolve_target(url, allow_private=False)


@pytest.mark.parametrize("url", [
    "http://[64:ff9b::127.0.0.1]/", "http://[64:ff9b::10.0.0.1]/h", "http://[64:ff9b::169.254.169.254]/",
    "http://[64:ff9b:1::a00:1]/", "http://[64:ff9b:1::808:808]/", "http://[64:ff9b:1:7f00:0:100::]/",
    "http://[::127.0.0.1]/", "http://[::10.1.2.3]/", "http://[::192.168.0.1]:8080/",
    "http://[::ffff:10.0.0.1]/", "http://[::ffff:0:127.0.0.1]/",
    "http://[2002:7f00:1::]/", "http://[2002:a00:1::1]/", "http://[2002:c0a8:101::]/", "http://[2002:a9fe:a9fe::]/",
    "http://[2001:0:7f00:1::]/", "http://[2001:0:808:808:0:0:80ff:fffe]/", "http://[2001:0:808:808::f5ff:fffe]/",
])
def test_guard_refuses_ipv6_forms_that_embed_or_translate_a_private_ipv4(url: str) -> None:
    with pytest.raises(TargetRefused):
        resolve_target(url, allow_private=False)


@pytest.mark.parametrize(("url", "address"), [
    ("http://[2606:4700::1111]/", "2606:4700::1111"),
    ("http://[64:ff9b::8.8.8.8]/", "64:ff9b::808:808"),
    ("http://[2002:808:808::1]/", "2002:808:808::1"),
    ("http://[::ffff:8.8.8.8]/", "::ffff:8.8.8.8"),
    ("https://[2a00:1450:4001:80b::200e]:8443/h", "2a00:1450:4001:80b::200e"),
])
def test_guard_allows_global_ipv6_targets(url: str, address: str) -> None:
    assert resolve_target(url, allow_private=False)[3] == address


def url_of(address: str) -> str:
    return f"http://[{address}]/h" if ":" in address else f"http://{address}/h"


#: Every entry of IANA's special-purpose registries, at both ends, and the addresses outside global unicast
#: that Python 3.11's `is_global` lets through.
REFUSED = [str(a) for b in SPECIAL_PURPOSE for a in (b.network[0], b.network[-1])] + [
    "fec0::1", "feff:ffff::1", "5f00::1", "5f00:ffff::1", "3fff::1", "3fff:fff:ffff::1",
    "4000::1", "1000::1", "::8.8.8.8", "::ffff:0:8.8.8.8", "ff0e::1", "224.0.0.1", "239.255.255.250",
    "2001:0:808:808:0:0:f7f7:f7f7",  # Teredo, server and client 8.8.8.8
    "64:ff9b::192.88.99.2", "2002:c000:0209::1", "::ffff:192.175.48.1",  # IPv4 forms of refused entries
]


@pytest.mark.parametrize("address", REFUSED)
def test_guard_refuses_every_special_purpose_and_non_unicast_address(address: str) -> None:
    with pytest.raises(TargetRefused):
        resolve_target(url_of(address), allow_private=False)


@pytest.mark.parametrize("address", [
    "1.1.1.1", "8.8.8.8", "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0", "192.0.1.255",
    "192.0.3.0", "192.88.98.255", "198.17.255.255", "198.20.0.0", "223.255.254.1",
    "2000::1", "2001:200::1", "2001:4860:4860::8888", "2606:4700::1111", "2620:4f:7fff::1", "2620:4f:8001::1",
    "3ffe:ffff::1", "3fff:1000::1", "64:ff9b::1.1.1.1", "::ffff:1.1.1.1", "2002:101:101::1",
])
def test_guard_allows_global_unicast_beside_the_special_entries(address: str) -> None:
    resolved = resolve_target(url_of(address), allow_private=False)[3]
    assert ipaddress.ip_address(resolved) == ipaddress.ip_address(address)


def test_the_table_lists_each_registry_entry_once_and_the_readme_shows_it() -> None:
    networks = [b.network for b in SPECIAL_PURPOSE]
    assert len(set(networks)) == len(networks)
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    rows = re.findall(r"^\| `([0-9a-f:./]+)` \|", readme, re.MULTILINE)
    assert rows == [str(n) for n in networks]


@pytest.mark.parametrize("url", ["ftp://example.com/h", "http:///h", "file:///etc/passwd", "http://u:p@8.8.8.8/",
                                 "http://8.8.8.8:99999/h", "//8.8.8.8/h"])
def test_guard_refuses_malformed_targets_even_when_private_is_allowed(url: str) -> None:
    with pytest.raises(TargetRefused):
        resolve_target(url, allow_private=True)


def test_guard_allows_public_targets_and_private_ones_when_configured() -> None:
    assert resolve_target("https://8.8.8.8/hook", allow_private=False) == ("https", "8.8.8.8", 443, "8.8.8.8")
    assert resolve_target("http://127.0.0.1:9/h", allow_private=True)[3] == "127.0.0.1"


def test_config_is_normalized_and_header_injection_is_refused() -> None:
    config = normalize_config({"url": "https://8.8.8.8/h", "token": "t",
                               "authentication": {"scheme": "Bearer", "credentials": "c"}}, "job-1")
    assert config == {"id": "job-1", "taskId": "job-1", "url": "https://8.8.8.8/h", "token": "t",
                      "authentication": {"scheme": "Bearer", "credentials": "c"}}
    for bad in ({"url": "https://8.8.8.8/h", "token": "a\r\nX-Evil: 1"}, {"token": "t"},
                {"url": "https://8.8.8.8/h", "authentication": {"scheme": "Bearer x"}}, "nope"):
        with pytest.raises(InvalidParams):
            normalize_config(bad, "job-1")


# -- configs ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("config", [
    {"url": "https://8.8.8.8/h", "token": "snow-\u2603"},
    {"url": "https://8.8.8.8/h", "authentication": {"scheme": "Bearer", "credentials": "\u2603"}},
    {"url": "https://8.8.8.8/h", "authentication": {"scheme": "B\u00e9arer", "credentials": "c"}},
    {"url": "https://8.8.8.8/h", "token": "tab\there"},
    {"url": "https://8.8.8.8/h", "token": "nul\x00"},
    {"url": "https://8.8.8.8/a hook"},
    {"url": "https://8.8.8.8/a\thook"},
    {"url": "https://8.8.8.8/\x7f"},
    {"url": "https://8.8.8.8/caf\u00e9"},
    {"url": "https://8.8.8.8/h", "id": "\ud800"},
])
def test_configs_that_can_never_be_sent_are_refused_when_created(config: dict[str, Any]) -> None:
    with pytest.raises(InvalidParams):
        normalize_config(config, "job-1")


def test_latin1_header_values_are_accepted() -> None:
    config = normalize_config({"url": "https://8.8.8.8/h?a=%C3%A9", "token": "caf\u00e9"}, "job-1")
    assert config["token"] == "caf\u00e9"
