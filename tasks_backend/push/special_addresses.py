"""Which addresses a webhook may be sent to: global unicast, minus IANA's special-purpose registries.

`SPECIAL_PURPOSE` is every entry of the IANA IPv4 and IPv6 Special-Purpose Address Registries
(https://www.iana.org/assignments/iana-ipv4-special-registry/,
https://www.iana.org/assignments/iana-ipv6-special-registry/), in the registries' order. An address is
allowed when it is global unicast (IPv6: inside `2000::/3`; IPv4: outside multicast) and inside no entry.
Rule: entries IANA calls globally reachable are refused too (anycast services, AS112 sinks, AMT relays: never
a webhook receiver); an address in an entry that only rewrites an IPv4 address is judged by that address.
Python's `is_global` is not used: it follows its release's copy of the registries, and only in part.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: IANA assigns global unicast from this block only; the rest of the IPv6 space is reserved, deprecated
#: (site-local `fec0::/10`), multicast or special-purpose.
GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
MULTICAST_V4 = ipaddress.IPv4Network("224.0.0.0/4")


@dataclass(frozen=True)
class Block:
    """One registry entry. `reachable`: IANA's "Globally Reachable" (None where it says N/A)."""

    network: IPNetwork
    name: str
    rfc: str
    reachable: bool | None
    embeds_ipv4: bool = False


#: The registries, one entry a line: prefix | name | RFC | globally reachable (yes, no, n/a) | `IPv4 inside`
#: where the entry only writes an IPv4 address into an IPv6 one (`embeds_ipv4`). Lines starting `#` are headings.
_REGISTRIES = """
# IPv4
0.0.0.0/8          | This network                                       | RFC 791 §3.2            | no
0.0.0.0/32         | This host on this network                          | RFC 1122 §3.2.1.3       | no
10.0.0.0/8         | Private-Use                                        | RFC 1918                | no
100.64.0.0/10      | Shared Address Space                               | RFC 6598                | no
127.0.0.0/8        | Loopback                                           | RFC 1122 §3.2.1.3       | no
169.254.0.0/16     | Link Local                                         | RFC 3927                | no
172.16.0.0/12      | Private-Use                                        | RFC 1918                | no
192.0.0.0/24       | IETF Protocol Assignments                          | RFC 6890 §2.1           | no
192.0.0.0/29       | IPv4 Service Continuity Prefix                     | RFC 7335                | no
192.0.0.8/32       | IPv4 dummy address                                 | RFC 7600                | no
192.0.0.9/32       | Port Control Protocol Anycast                      | RFC 7723                | yes
192.0.0.10/32      | Traversal Using Relays around NAT Anycast          | RFC 8155                | yes
192.0.0.170/32     | NAT64/DNS64 Discovery                              | RFC 8880, RFC 7050 §2.2 | no
192.0.0.171/32     | NAT64/DNS64 Discovery                              | RFC 8880, RFC 7050 §2.2 | no
192.0.2.0/24       | Documentation (TEST-NET-1)                         | RFC 5737                | no
192.31.196.0/24    | AS112-v4                                           | RFC 7535                | yes
192.52.193.0/24    | AMT                                                | RFC 7450                | yes
192.88.99.0/24     | Deprecated (6to4 Relay Anycast)                    | RFC 7526                | n/a
192.88.99.2/32     | 6a44-relay anycast address                         | RFC 6751                | no
192.168.0.0/16     | Private-Use                                        | RFC 1918                | no
192.175.48.0/24    | Direct Delegation AS112 Service                    | RFC 7534                | yes
198.18.0.0/15      | Benchmarking                                       | RFC 2544                | no
198.51.100.0/24    | Documentation (TEST-NET-2)                         | RFC 5737                | no
203.0.113.0/24     | Documentation (TEST-NET-3)                         | RFC 5737                | no
240.0.0.0/4        | Reserved                                           | RFC 1112 §4             | no
255.255.255.255/32 | Limited Broadcast                                  | RFC 8190, RFC 919 §7    | no
# IPv6
::1/128            | Loopback Address                                   | RFC 4291                | no
::/128             | Unspecified Address                                | RFC 4291                | no
::ffff:0:0/96      | IPv4-mapped Address                                | RFC 4291                | no  | IPv4 inside
64:ff9b::/96       | IPv4-IPv6 Translation (well-known prefix)          | RFC 6052                | yes | IPv4 inside
64:ff9b:1::/48     | IPv4-IPv6 Translation (local use)                  | RFC 8215                | no
100::/64           | Discard-Only Address Block                         | RFC 6666                | no
100:0:0:1::/64     | Dummy IPv6 Prefix                                  | RFC 9780                | no
2001::/23          | IETF Protocol Assignments                          | RFC 2928                | no
2001::/32          | TEREDO                                             | RFC 4380, RFC 8190      | n/a
2001:1::1/128      | Port Control Protocol Anycast                      | RFC 7723                | yes
2001:1::2/128      | Traversal Using Relays around NAT Anycast          | RFC 8155                | yes
2001:1::3/128      | DNS-SD Service Registration Protocol Anycast       | RFC 9665                | yes
2001:2::/48        | Benchmarking                                       | RFC 5180, Errata 1752   | no
2001:3::/32        | AMT                                                | RFC 7450                | yes
2001:4:112::/48    | AS112-v6                                           | RFC 7535                | yes
2001:10::/28       | Deprecated (previously ORCHID)                     | RFC 4843                | n/a
2001:20::/28       | ORCHIDv2                                           | RFC 7343                | yes
2001:30::/28       | Drone Remote ID Protocol Entity Tags (DETs) Prefix | RFC 9374                | yes
2001:db8::/32      | Documentation                                      | RFC 3849                | no
2002::/16          | 6to4                                               | RFC 3056                | n/a | IPv4 inside
2620:4f:8000::/48  | Direct Delegation AS112 Service                    | RFC 7534                | yes
3fff::/20          | Documentation                                      | RFC 9637                | no
5f00::/16          | Segment Routing (SRv6) SIDs                        | RFC 9602                | no
fc00::/7           | Unique-Local                                       | RFC 4193, RFC 8190      | no
fe80::/10          | Link-Local Unicast                                 | RFC 4291                | no
"""
_REACHABLE = {"yes": True, "no": False, "n/a": None}


def _entries(table: str) -> tuple[Block, ...]:
    rows = [[cell.strip() for cell in line.split("|")] for line in table.strip().splitlines()
            if not line.startswith("#")]
    return tuple(Block(ipaddress.ip_network(prefix), name, rfc, _REACHABLE[reachable], rest == ["IPv4 inside"])
                 for prefix, name, rfc, reachable, *rest in rows)


#: Teredo (`2001::/32`) is not marked `embeds_ipv4`: its client address is obfuscated and the tunnel it needs
#: is long out of use, so it is refused with `2001::/23`. (Python 3.11's `is_global` calls `fec0::/10`,
#: `5f00::/16` and `3fff::/20` global.)
SPECIAL_PURPOSE: tuple[Block, ...] = _entries(_REGISTRIES)


def special_block(ip: IPAddress) -> Block | None:
    """The most specific registry entry holding `ip`, if any."""
    holding = [b for b in SPECIAL_PURPOSE if ip in b.network]
    return max(holding, key=lambda b: b.network.prefixlen, default=None)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)  # RFC 6052 /96: the last 32 bits


def allowed_target(ip: IPAddress) -> bool:
    """Whether a webhook may be sent to `ip`: global unicast and in no special-purpose entry, judged by
    the IPv4 address inside for the entries that only write one."""
    block = special_block(ip)
    if isinstance(ip, ipaddress.IPv6Address):
        if block is not None and block.embeds_ipv4:
            return allowed_target(_embedded_ipv4(ip))
        return block is None and ip in GLOBAL_UNICAST_V6
    return block is None and ip not in MULTICAST_V4
