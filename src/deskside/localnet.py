"""Network namespaces for nodes that run on this machine (`netns:` in the recipe): each
node gets its own namespace with a veth whose far end is on a local bridge, so the nodes
(and deskside, from the root namespace) reach each other over real interfaces at the
recipe's fabric addresses. Commands are built purely; a root-namespace transport runs them.
"""

from __future__ import annotations

import ipaddress
import shutil
import time
from dataclasses import dataclass

from deskside.errors import DesksideError
from deskside.recipe.types import Recipe
from deskside.transport.base import Transport

# how long a start waits for a just-deleted namespace's veth pair to be freed by the kernel
STALE_LINK_SECONDS = 10.0


@dataclass(frozen=True)
class LocalNet:
    bridge: str
    bridge_address: str  # CIDR, the root namespace's address on the bridge
    namespaces: tuple[tuple[str, str, str, str], ...]  # (netns, iface, host-side veth, CIDR)
    mtu: int | None


def bridge_name(first_netns: str) -> str:
    """deskside's name for the bridge of a run's namespaces (the alphabetically first one's
    name after `dsbr-`, as long as a link name may be)."""
    return f"dsbr-{first_netns}"[:15]


def local_net(recipe: Recipe) -> LocalNet | None:
    """The namespaces a recipe asks for, or None when no node has `netns`."""
    nodes = [n for n in recipe.cluster.nodes if n.netns]
    if not nodes:
        return None
    entries = []
    networks = set()
    for node in nodes:
        assert node.fabric is not None and node.netns is not None  # recipe rules
        iface = ipaddress.IPv4Interface(f"{node.fabric.address}/24")
        networks.add(iface.network)
        entries.append((node.netns, node.fabric.interface, f"{node.netns}-h", str(iface)))
    if len(networks) != 1:
        raise DesksideError(
            "nodes in network namespaces must share one /24 network",
            hint="give their fabric addresses the same first three numbers",
        )
    network = networks.pop()
    used = {ipaddress.IPv4Interface(cidr).ip for *_, cidr in entries}
    gateway = next(ip for ip in reversed(list(network.hosts())) if ip not in used)
    return LocalNet(
        bridge=bridge_name(min(n.netns for n in nodes if n.netns)),
        bridge_address=f"{gateway}/{network.prefixlen}",
        namespaces=tuple(entries),
        mtu=recipe.cluster.fabric.mtu,
    )


def setup_commands(net: LocalNet, existing: set[str]) -> list[list[str]]:
    """ip(8) commands that create what is missing (namespaces in `existing` are kept)."""
    cmds: list[list[str]] = []
    if not existing:
        cmds += [
            ["ip", "link", "add", net.bridge, "type", "bridge"],
            ["ip", "addr", "add", net.bridge_address, "dev", net.bridge],
            ["ip", "link", "set", net.bridge, "up"],
        ]
    for ns, iface, host_side, cidr in net.namespaces:
        if ns in existing:
            continue
        mtu = ["mtu", str(net.mtu)] if net.mtu else []
        cmds += [
            ["ip", "netns", "add", ns],
            [
                "ip",
                "link",
                "add",
                host_side,
                *mtu,
                "type",
                "veth",
                "peer",
                "name",
                iface,
                "netns",
                ns,
            ],
            ["ip", "link", "set", host_side, "master", net.bridge, "up"],
            ["ip", "-n", ns, "addr", "add", cidr, "dev", iface],
            ["ip", "-n", ns, "link", "set", iface, "up"],
            ["ip", "-n", ns, "link", "set", "lo", "up"],
        ]
    return cmds


def teardown_commands(net: LocalNet) -> list[list[str]]:
    """Deleting a namespace deletes its veth pair; then the bridge."""
    return [["ip", "netns", "del", ns] for ns, *_ in net.namespaces] + [
        ["ip", "link", "del", net.bridge]
    ]


def existing_namespaces(root: Transport) -> set[str]:
    result = root.run(["ip", "netns", "list"])
    return {line.split()[0] for line in result.stdout.splitlines() if line.strip()}


def link_names(ip_o_link: str) -> set[str]:
    """Link names from `ip -o link show` (`534: ds-node1-h@if2: <...> ...`)."""
    names = set()
    for line in ip_o_link.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[0].strip().isdigit():
            names.add(parts[1].strip().split("@", 1)[0])
    return names


def stale_links(net: LocalNet, existing: set[str], links: set[str]) -> list[str]:
    """Host-side veths of namespaces that do not exist: a namespace deleted while a process
    still held it keeps its pair alive, and creating the namespace again would fail with
    "File exists". Reported, never deleted (deskside cannot prove they are its own)."""
    return [
        host_side
        for ns, _, host_side, _ in net.namespaces
        if ns not in existing and host_side in links
    ]


def namespaces_without_stale_links(
    here: Transport, net: LocalNet, seconds: float = STALE_LINK_SECONDS
) -> set[str]:
    """The namespaces that exist, once no host-side veth of `net` is left without its
    namespace. The kernel frees a deleted namespace's pair a moment after `ip netns del`
    (right after a `down`), so such links get `seconds` to go; one left longer is another
    process's hold: DesksideError (stale_link_error)."""
    deadline = time.monotonic() + seconds
    while True:
        existing = existing_namespaces(here)
        listed = here.run(["ip", "-o", "link", "show"])
        stale = stale_links(net, existing, link_names(listed.stdout))
        if not stale:
            return existing
        if time.monotonic() > deadline:
            raise stale_link_error(stale)
        time.sleep(0.25)


def stale_link_error(names: list[str]) -> DesksideError:
    shown = ", ".join(names)
    return DesksideError(
        f"network link {shown} already exists while its namespace does not: left by an "
        "earlier run whose namespace a process still holds (a leftover engine rank)",
        hint=f"`ip -d link show {names[0]}` names the peer's namespace id; stop the process "
        f"that holds it (`lsns -t net`), or remove the link with `ip link del {names[0]}` "
        "if it is yours",
    )


def can_create() -> tuple[bool, str]:
    """Whether this process can make namespaces (root and ip(8)), and why not."""
    import os

    if shutil.which("ip") is None:
        return False, "ip(8) is not installed (Debian package iproute2)"
    if os.geteuid() != 0:
        return False, "creating network namespaces needs root"
    return True, ""


def remove(net: LocalNet, root: Transport) -> None:
    for cmd in teardown_commands(net):
        root.run(cmd)
