"""A node's network: its interfaces (`ip -j addr`: MTU, carrier, IPv4 addresses), the TCP
ports something listens on (/proc/net/tcp and tcp6), and who holds given ports (`ss`)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from deskside.facts.base import Fact, FactError

LISTENING_SH = r"""
for f in /proc/net/tcp /proc/net/tcp6; do
  if [ -r "$f" ]; then awk 'NR > 1 && $4 == "0A" { print $2 }' "$f"; fi
done
"""

# Per port, the listening sockets and their processes (`users:(("name",pid=N,fd=M))`), in
# the namespace the command runs in; nothing when ss is missing.
HOLDERS_SH = r"""
command -v ss >/dev/null 2>&1 || exit 0
for port in "$@"; do
  ss -ltnpH "sport = :$port" 2>/dev/null | sed "s/^/port $port /"
done
"""

UNNAMED = "a process ss cannot name"


@dataclass(frozen=True)
class Link:
    """One interface of `ip -j addr show`."""

    name: str
    mtu: int | None
    operstate: str | None  # "UP", "DOWN", "UNKNOWN" (ip prints uppercase)
    flags: tuple[str, ...]
    ipv4: tuple[str, ...]  # "a.b.c.d/len"

    @property
    def up(self) -> bool:
        """Carrier up: operstate UP, or UNKNOWN with LOWER_UP (drivers without operstate)."""
        if self.operstate == "UP":
            return True
        return self.operstate == "UNKNOWN" and "LOWER_UP" in self.flags

    def has_address(self, address: str) -> bool:
        return any(cidr.split("/", 1)[0] == address for cidr in self.ipv4)


def parse_links(text: str) -> dict[str, Link]:
    """`ip -j addr show [dev X]`: interface name -> Link (entries that are not interfaces
    are skipped; output that is not a JSON list is refused)."""
    try:
        data: Any = json.loads(text.strip() or "[]")
    except (json.JSONDecodeError, RecursionError):
        raise FactError("not the JSON `ip -j addr` prints") from None
    if not isinstance(data, list):
        raise FactError("not a JSON list")
    links: dict[str, Link] = {}
    for item in data:
        if not isinstance(item, dict) or not isinstance(item.get("ifname"), str):
            continue
        addrs = item.get("addr_info")
        ipv4 = tuple(
            f"{a['local']}/{a.get('prefixlen', 32)}"
            for a in (addrs if isinstance(addrs, list) else [])
            if isinstance(a, dict) and a.get("family") == "inet" and isinstance(a.get("local"), str)
        )
        mtu, state, flags = item.get("mtu"), item.get("operstate"), item.get("flags")
        links[item["ifname"]] = Link(
            name=item["ifname"],
            mtu=mtu if isinstance(mtu, int) and not isinstance(mtu, bool) else None,
            operstate=state if isinstance(state, str) else None,
            flags=tuple(
                f for f in (flags if isinstance(flags, list) else []) if isinstance(f, str)
            ),
            ipv4=ipv4,
        )
    return links


def links(interface: str | None = None) -> Fact[dict[str, Link]]:
    """Every interface, or only `interface` (the fact is unread when it does not exist).
    Facts of different interfaces have different names: one round trip may read several."""
    script = 'if [ -n "$1" ]; then exec ip -j addr show dev "$1"; fi; exec ip -j addr show'
    name = f"links {interface}" if interface else "links"
    return Fact(name, script, parse_links, args=(interface or "",))


def interface_for_address(found: dict[str, Link], address: str) -> str | None:
    """The interface carrying `address`."""
    for link in found.values():
        if link.has_address(address):
            return link.name
    return None


def _port(hex_address: str) -> int | None:
    """The port of a /proc/net/tcp local address (`0100007F:1F90`)."""
    try:
        port = int(hex_address.rsplit(":", 1)[1], 16)
    except (IndexError, ValueError):
        return None
    return port if 0 < port < 65536 else None


def parse_listening(text: str) -> frozenset[int]:
    return frozenset(p for p in (_port(w) for w in text.split()) if p is not None)


def listening() -> Fact[frozenset[int]]:
    """The TCP ports something listens on, in the network namespace the fact runs in."""
    return Fact("listening", LISTENING_SH, parse_listening)


def parse_holders(text: str) -> dict[int, str]:
    """port -> who listens there (`name pid N`, several joined by `, `)."""
    out: dict[int, list[str]] = {}
    for line in text.splitlines():
        parts = line.split(" ", 2)
        if len(parts) < 3 or parts[0] != "port" or not parts[1].isdigit():
            continue
        who = [f"{n} pid {p}" for n, p in re.findall(r'\("([^"]*)",pid=([0-9]+)', parts[2])]
        out.setdefault(int(parts[1]), []).extend(who or [UNNAMED])
    return {port: ", ".join(dict.fromkeys(who)) for port, who in out.items()}


def port_holders(ports: Iterable[int]) -> Fact[dict[int, str]]:
    """Who listens on each of `ports` (ports nobody holds are absent)."""
    return Fact("port_holders", HOLDERS_SH, parse_holders, args=tuple(str(p) for p in ports))
