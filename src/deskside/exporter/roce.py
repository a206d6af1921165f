"""The RoCEv2 GID index of the node's fabric HCAs, now and as the running engine has it.

Now: the node's sysfs (`<sysfs-root>/class/infiniband`) resolved for its fabric address
with the same rule the launch script applies (`deskside.fabric.gid.resolve_node`). The
engine's: NCCL_IB_GID_INDEX in the environment it was started with. A GID index changes
when addresses are added to or removed from the fabric netdev; the engine keeps the index
it started with, and NCCL then talks to a GID that means something else (or nothing)."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from deskside.fabric.gid import (
    NodeResolution,
    gid_drift,
    recorded_gid_index,
    resolve_node,
    split_hca,
)
from deskside.fabric.sysfs import DirSource, SysfsSnapshot, read_device, read_netdev
from deskside.recipe.types import Node, Recipe


@dataclass(frozen=True)
class PortIndex:
    device: str
    port: int
    gid_index: int


@dataclass(frozen=True)
class DeviceDrift:
    device: str
    launched: int | None  # the engine's NCCL_IB_GID_INDEX, None when unset or not a number
    drift: bool  # not the index sysfs gives now (or unset, not a number, unresolvable)


@dataclass(frozen=True)
class RoceReading:
    ports: tuple[PortIndex, ...]  # ports whose GID index resolves now
    drifts: tuple[DeviceDrift, ...]  # empty when no engine runs
    error: str | None  # why the node's index does not resolve (None when it does)


def applies(recipe: Recipe, node: Node) -> bool:
    """Whether the node has a RoCE GID index at all: transport roce and listed HCAs."""
    return (
        recipe.cluster.fabric.transport == "roce"
        and node.fabric is not None
        and bool(node.fabric.hcas)
    )


@dataclass(frozen=True)
class ScrapeSource(DirSource):
    """`DirSource` with the same refusals, made cheap enough for every scrape: a directory
    is resolved (realpath, checked inside the root) once, and a file that is not a link
    is read from its resolved directory without resolving it again. A GID table has 256
    slots per port, each three files: DirSource resolves every one of them twice."""

    _dirs: dict[str, str | None] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def _inside(self, rel: str) -> str | None:
        parent, _, name = rel.rpartition("/")
        if not parent or name in ("", ".", ".."):
            return super()._inside(rel)
        if parent not in self._dirs:
            self._dirs[parent] = super()._inside(parent)
        real_parent = self._dirs[parent]
        if real_parent is None:
            return None
        self._walk.tick(self.root, rel)
        path = os.path.join(real_parent, name)
        try:
            link = stat.S_ISLNK(os.lstat(path).st_mode)
        except OSError:
            return None
        return super()._inside(rel) if link else path  # links resolve as DirSource's do


def resolve(sysfs_root: Path, node: Node) -> NodeResolution | None:
    """The node's fresh resolution, reading only its listed devices and fabric netdev;
    None when the tree has no RDMA device at all."""
    assert node.fabric is not None
    source = ScrapeSource(sysfs_root)
    present = set(source.listdir("class/infiniband"))
    if not present:
        return None
    wanted = dict.fromkeys(split_hca(h)[0] for h in node.fabric.hcas)
    devices = tuple(read_device(source, name) for name in wanted if name in present)
    interface = node.fabric.interface
    snapshot = SysfsSnapshot(
        source=source.describe(),
        devices=devices,
        netdevs={interface: read_netdev(source, interface)},
    )
    return resolve_node(snapshot, node.fabric.address, node.fabric.hcas, interface)


def _launched(env: Mapping[str, str]) -> int | None:
    value = (recorded_gid_index(env) or "").strip()
    return int(value) if value.isdigit() else None


def reading(
    resolution: NodeResolution, hcas: list[str], engine_env: Mapping[str, str] | None
) -> RoceReading:
    ports = tuple(
        PortIndex(p.device, p.port, p.gid_index)
        for p in resolution.ports
        if p.gid_index is not None and p.port is not None
    )
    drifts: list[DeviceDrift] = []
    if engine_env is not None:
        # NCCL_IB_GID_INDEX is one number for every device of NCCL_IB_HCA: the node's
        # verdict (`gid_drift`, as `deskside status` gives it) holds for each device
        launched = _launched(engine_env)
        drift = not gid_drift(recorded_gid_index(engine_env), resolution).ok
        for device in dict.fromkeys(split_hca(h)[0] for h in hcas):
            drifts.append(DeviceDrift(device, launched, drift))
    error = None if resolution.ok else str((resolution.error or {}).get("message", ""))
    return RoceReading(ports=ports, drifts=tuple(drifts), error=error or None)
