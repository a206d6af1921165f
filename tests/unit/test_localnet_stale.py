"""A host-side veth left by a namespace that a leftover process held: found before `up`
tries to create the namespace again (which fails with "File exists"), reported with the
commands that find and remove it, never deleted."""

from __future__ import annotations

from deskside.localnet import LocalNet, link_names, stale_link_error, stale_links

# `ip -o link show` as iproute2 prints it (abridged)
IP_O_LINK = """1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT
2: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc mq state UP mode DEFAULT
534: ds-node1-h@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue master dsbr-ds
    link/ether 36:4f:39:e6:91:c4 brd ff:ff:ff:ff:ff:ff link-netnsid 3
535: dsbr-ds-node0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP
"""

NET = LocalNet(
    bridge="dsbr-ds-node0",
    bridge_address="10.77.0.254/24",
    namespaces=(
        ("ds-node0", "ds-veth0", "ds-node0-h", "10.77.0.1/24"),
        ("ds-node1", "ds-veth1", "ds-node1-h", "10.77.0.2/24"),
    ),
    mtu=None,
)


def test_link_names() -> None:
    assert link_names(IP_O_LINK) == {"lo", "eth0", "ds-node1-h", "dsbr-ds-node0"}


def test_a_veth_without_its_namespace_is_stale() -> None:
    links = link_names(IP_O_LINK)
    assert stale_links(NET, existing=set(), links=links) == ["ds-node1-h"]
    # the namespace is there (another run of the same recipe): not stale, `up` says why
    assert stale_links(NET, existing={"ds-node1"}, links=links) == []
    assert stale_links(NET, existing=set(), links={"lo", "eth0"}) == []


def test_the_error_says_how_to_find_and_remove_it() -> None:
    err = stale_link_error(["ds-node1-h"])
    assert "ds-node1-h already exists while its namespace does not" in err.message
    assert "ip -d link show ds-node1-h" in (err.hint or "")
    assert "ip link del ds-node1-h" in (err.hint or "")
