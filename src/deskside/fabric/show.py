"""`deskside fabric show`: what each node's fabric looks like and which GID index it gets.

Two entry points: `show_snapshot` reads one sysfs tree (a directory: the live `/sys`, a
copy, a fixture); `show_recipe` asks every node of a recipe through its transport (the
same sysfs dump and `ip -j addr` the check uses).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from ipaddress import IPv4Address
from typing import Any

from pydantic import BaseModel, ConfigDict

from deskside.engine.launch import node_ip
from deskside.fabric import probe
from deskside.fabric.gid import PortResolution, ipv4_mapped_gid, resolve_node, resolve_ports
from deskside.fabric.sysfs import GidEntry, SysfsSource, read_snapshot
from deskside.fabric.sysfs_dump import dump_command, parse_dump
from deskside.facts.network import Link
from deskside.recipe.types import Node, Recipe
from deskside.transport.base import Transport

_CONFIG = ConfigDict(extra="forbid", frozen=True)


class PortView(PortResolution):
    """A row of `fabric show`: PortResolution plus the port's GID table."""

    gids: tuple[dict[str, Any], ...]


class SnapshotView(BaseModel):
    model_config = _CONFIG

    sysfs_root: str
    address: str | None
    expected_gid: str | None
    interface: str | None
    ports: tuple[PortView, ...]


class NodeView(BaseModel):
    model_config = _CONFIG

    name: str
    role: str
    transport: str
    interface: str | None
    address: str
    mtu: int | None
    operstate: str | None
    ipv4: tuple[str, ...]
    hcas: tuple[str, ...]
    gid_index: int | None
    error: dict[str, Any] | None
    ports: tuple[PortView, ...]


class RecipeView(BaseModel):
    model_config = _CONFIG

    recipe: str
    transport: str
    nodes: tuple[NodeView, ...]


def _gid_dict(g: GidEntry) -> dict[str, Any]:
    return {"index": g.index, "gid": g.address or g.gid, "type": g.gid_type, "ndev": g.ndev}


def _table(
    tables: Mapping[tuple[str, int], tuple[GidEntry, ...]], device: str, port: int | None
) -> tuple[GidEntry, ...]:
    return tables.get((device, port), ()) if port is not None else ()


def _views(
    resolutions: Sequence[PortResolution],
    tables: Mapping[tuple[str, int], tuple[GidEntry, ...]],
) -> tuple[PortView, ...]:
    return tuple(
        PortView(
            **r.model_dump(),
            gids=tuple(_gid_dict(g) for g in _table(tables, r.device, r.port)),
        )
        for r in resolutions
    )


def show_snapshot(
    source: SysfsSource,
    address: IPv4Address | str | None = None,
    interface: str | None = None,
    hcas: Sequence[str] | None = None,
    ip_addrs: Mapping[str, Link] | None = None,
) -> SnapshotView:
    """Per device port of one sysfs tree: facts and (with an address) the GID choice."""
    snapshot = read_snapshot(source, ip_addrs, [interface] if interface else [])
    tables = {(p.device, p.port): p.gids for d in snapshot.devices for p in d.ports}
    ports = resolve_ports(snapshot, address, list(hcas) if hcas else None, interface)
    return SnapshotView(
        sysfs_root=snapshot.source,
        address=str(address) if address is not None else None,
        expected_gid=ipv4_mapped_gid(address) if address is not None else None,
        interface=interface,
        ports=_views(ports, tables),
    )


def _node_view(recipe: Recipe, node: Node, t: Transport, sysfs_root: str) -> NodeView:
    address = node_ip(node)
    links = probe.parse_addr(t.run(probe.addr_command(), timeout=30))
    interface = node.fabric.interface if node.fabric else None
    interface = interface or probe.interface_for_address(links, address)
    link = links.get(interface) if interface else None
    dumped = t.run(dump_command(sysfs_root), timeout=60)
    snapshot = read_snapshot(
        parse_dump(dumped.stdout, origin=f"{t.name}:{sysfs_root}"),
        links,
        [interface] if interface else [],
    )
    tables = {(p.device, p.port): p.gids for d in snapshot.devices for p in d.ports}
    hcas = tuple(node.fabric.hcas) if node.fabric else ()
    gid_index: int | None = None
    error: dict[str, Any] | None = None
    if recipe.cluster.fabric.transport == "roce" and node.fabric is not None:
        res = resolve_node(snapshot, node.fabric.address, node.fabric.hcas, node.fabric.interface)
        ports = list(res.ports)
        gid_index, error = res.gid_index, res.error
    else:
        ports = resolve_ports(snapshot, None, list(hcas) or None, interface)
    return NodeView(
        name=node.name,
        role=node.role,
        transport=t.name,
        interface=interface,
        address=address,
        mtu=link.mtu if link else None,
        operstate=link.operstate if link else None,
        ipv4=link.ipv4 if link else (),
        hcas=hcas,
        gid_index=gid_index,
        error=error,
        ports=_views(ports, tables),
    )


def show_recipe(
    recipe: Recipe, transports: Mapping[str, Transport], sysfs_root: str = "/sys"
) -> RecipeView:
    nodes = [recipe.head, *recipe.workers]
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        views = list(
            pool.map(lambda n: _node_view(recipe, n, transports[n.name], sysfs_root), nodes)
        )
    return RecipeView(
        recipe=recipe.name, transport=recipe.cluster.fabric.transport, nodes=tuple(views)
    )
