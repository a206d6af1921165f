"""RoCEv2 GID selection for NCCL_IB_GID_INDEX, and drift against a running configuration.

The rule (docs/fabric.md, docs/flagship.md #7), per listed RDMA device and port:

1. the port must be ACTIVE;
2. exactly one GID entry must be `RoCE v2`, carry the IPv4-mapped form of the node's fabric
   address (`::ffff:a.b.c.d`, which sysfs writes `0000:0000:0000:0000:0000:ffff:xxxx:xxxx`),
   and belong to the expected netdev (the recipe's fabric interface, else the device's
   own netdev);
3. every listed port must agree on the index (NCCL_IB_GID_INDEX is one number per process).

Anything else fails closed with the entries that *were* found. There is no default: an
empty NCCL_IB_GID_INDEX parses as 0, a link-local GID, and NCCL wedges. The POSIX sh
snippet in `deskside.fabric.launch_sh` applies the same rules at start-up on the node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from ipaddress import IPv4Address
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from deskside.errors import DesksideError
from deskside.fabric.sysfs import GidEntry, RdmaPort, SysfsSnapshot

ROCE_V2 = "RoCE v2"
_CONFIG = ConfigDict(extra="forbid", frozen=True)

ErrorKind = Literal[
    "no_device", "no_port", "port_down", "not_found", "ambiguous", "disagree", "no_hcas"
]


def ipv4_mapped_gid(address: IPv4Address | str) -> str:
    """The GID sysfs shows for a RoCE IPv4 address: 192.168.100.1 ->
    `0000:0000:0000:0000:0000:ffff:c0a8:6401` (lowercase, as the kernel prints it)."""
    packed = IPv4Address(str(address)).packed
    return "0000:0000:0000:0000:0000:ffff:" + f"{packed[:2].hex()}:{packed[2:].hex()}"


def split_hca(hca: str) -> tuple[str, int | None]:
    """`rocep1s0f0` -> (rocep1s0f0, None); `mlx5_0:1` -> (mlx5_0, 1) (NCCL_IB_HCA syntax)."""
    name, sep, port = hca.partition(":")
    return name, (int(port) if sep and port.isdigit() else None)


class GidCandidate(BaseModel):
    """A GID table entry, as listed when selection fails."""

    model_config = _CONFIG

    index: int
    gid: str
    address: str | None
    type: str | None
    ndev: str | None

    @classmethod
    def of(cls, entry: GidEntry) -> GidCandidate:
        return cls(
            index=entry.index,
            gid=entry.gid,
            address=entry.address,
            type=entry.gid_type,
            ndev=entry.ndev,
        )


class GidSelectionError(DesksideError):
    """No single RoCE v2 GID for the node's fabric address: refuse rather than guess."""

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        *,
        kind: ErrorKind,
        device: str | None = None,
        port: int | None = None,
        found: Sequence[GidEntry] = (),
    ) -> None:
        super().__init__(message, hint)
        self.kind: ErrorKind = kind
        self.device = device
        self.port = port
        self.found = tuple(GidCandidate.of(g) for g in found)

    def to_dict(self) -> dict[str, object]:
        data = super().to_dict()
        data["kind"] = self.kind
        if self.device is not None:
            data["device"] = self.device
        if self.port is not None:
            data["port"] = self.port
        data["found"] = [c.model_dump() for c in self.found]
        return data


def _listing(entries: Sequence[GidEntry]) -> str:
    if not entries:
        return "the GID table is empty"
    return "found: " + "; ".join(e.describe() for e in entries)


def select_gid(port: RdmaPort, address: IPv4Address | str, netdev: str | None) -> GidEntry:
    """The one RoCE v2 entry of `port` carrying `address` on `netdev`, or GidSelectionError.

    Only the GID table is looked at here; `resolve_port` adds the port-state gate."""
    want = ipv4_mapped_gid(address)
    where = f"{port.device} port {port.port}"
    if netdev is None:
        raise GidSelectionError(
            f"{where}: cannot tell which netdev the device belongs to",
            hint="name the fabric interface (recipe fabric.interface or --interface)",
            kind="not_found",
            device=port.device,
            port=port.port,
            found=port.gids,
        )
    matches = [
        g for g in port.gids if g.gid.lower() == want and g.gid_type == ROCE_V2 and g.ndev == netdev
    ]
    if len(matches) == 1:
        return matches[0]
    if matches:
        indexes = ", ".join(str(g.index) for g in matches)
        raise GidSelectionError(
            f"{where}: {len(matches)} RoCE v2 GIDs carry ::ffff:{address} on {netdev} "
            f"(indexes {indexes}); refusing to guess. {_listing(port.gids)}",
            hint=f"remove the duplicate address from {netdev} (`ip -4 addr show dev {netdev}`)"
            " so exactly one entry remains",
            kind="ambiguous",
            device=port.device,
            port=port.port,
            found=port.gids,
        )
    same = [g for g in port.gids if g.gid.lower() == want]
    if any(g.gid_type == ROCE_V2 and g.ndev and g.ndev != netdev for g in same):
        other = next(g.ndev for g in same if g.gid_type == ROCE_V2 and g.ndev != netdev)
        hint = (
            f"::ffff:{address} is on netdev {other}, not {netdev}: fix the recipe's "
            "fabric.interface or move the address"
        )
    elif same and all(g.gid_type is None or g.ndev is None for g in same):
        hint = "the entry's gid_attrs are unreadable; check the driver (mlx5_ib) and kernel"
    elif same:
        hint = (
            "only RoCE v1 entries carry the address: enable RoCE v2 on the device "
            "(e.g. `cma_roce_mode -d DEV -p PORT -m 2`)"
        )
    else:
        hint = (
            f"configure {address} on {netdev} (`ip -4 addr show dev {netdev}`) and check "
            "that the recipe's fabric.address is this node's address on the RoCE link"
        )
    raise GidSelectionError(
        f"{where}: no RoCE v2 GID carries ::ffff:{address} on {netdev}; {_listing(port.gids)}",
        hint=hint,
        kind="not_found",
        device=port.device,
        port=port.port,
        found=port.gids,
    )


class PortResolution(BaseModel):
    """One device port: its facts and the chosen GID index, or why there is none."""

    model_config = _CONFIG

    device: str
    port: int | None
    state: str | None
    rate_gbps: float | None
    link_layer: str | None
    netdev: str | None
    mtu: int | None
    ipv4: tuple[str, ...] | None
    gid_index: int | None
    gid: str | None
    error: dict[str, Any] | None

    @property
    def ok(self) -> bool:
        return self.gid_index is not None and self.error is None


def _unresolved(
    device: str, port: int | None, error: GidSelectionError, **facts: Any
) -> PortResolution:
    base: dict[str, Any] = {
        "state": None,
        "rate_gbps": None,
        "link_layer": None,
        "netdev": None,
        "mtu": None,
        "ipv4": None,
    }
    base.update(facts)
    return PortResolution(
        device=device, port=port, gid_index=None, gid=None, error=error.to_dict(), **base
    )


def resolve_ports(
    snapshot: SysfsSnapshot,
    address: IPv4Address | str | None,
    hcas: Sequence[str] | None = None,
    interface: str | None = None,
) -> list[PortResolution]:
    """Per device port (all devices when `hcas` is None): facts and the GID choice.

    Without an address no GID is chosen (gid_index and error stay None)."""
    wanted = [split_hca(h) for h in hcas] if hcas is not None else None
    if wanted is None:
        wanted = [(d.name, None) for d in snapshot.devices]
    results: list[PortResolution] = []
    for name, only_port in wanted:
        dev = snapshot.device(name)
        if dev is None:
            known = ", ".join(d.name for d in snapshot.devices) or "none"
            results.append(
                _unresolved(
                    name,
                    only_port,
                    GidSelectionError(
                        f"RDMA device {name} not found in {snapshot.source}/class/infiniband "
                        f"(devices: {known})",
                        hint="check the recipe's fabric.hcas against `ls /sys/class/infiniband`"
                        " on the node (is the mlx5_ib driver loaded?)",
                        kind="no_device",
                        device=name,
                        port=only_port,
                    ),
                )
            )
            continue
        ports = [p for p in dev.ports if only_port is None or p.port == only_port]
        if not ports:
            results.append(
                _unresolved(
                    name,
                    only_port,
                    GidSelectionError(
                        f"{name} has no port {only_port}"
                        if only_port is not None
                        else f"{name} has no ports",
                        hint=f"ports of {name}: "
                        + (", ".join(str(p.port) for p in dev.ports) or "none"),
                        kind="no_port",
                        device=name,
                        port=only_port,
                    ),
                )
            )
            continue
        for port in ports:
            netdev_name = interface or dev.netdev
            nd = snapshot.netdevs.get(netdev_name) if netdev_name else None
            facts: dict[str, Any] = {
                "state": port.state_name,
                "rate_gbps": port.rate_gbps,
                "link_layer": port.link_layer,
                "netdev": netdev_name,
                "mtu": nd.mtu if nd else None,
                "ipv4": nd.ipv4 if nd else None,
            }
            if address is None:
                results.append(
                    PortResolution(
                        device=name, port=port.port, gid_index=None, gid=None, error=None, **facts
                    )
                )
                continue
            try:
                if not port.active:
                    raise GidSelectionError(
                        f"{name} port {port.port} is not ACTIVE "
                        f"(state: {port.state or 'unreadable'})",
                        hint="check the cable and the link partner (`rdma link`, "
                        f"`ip link show {netdev_name or ''}`); NCCL cannot use a port that is down",
                        kind="port_down",
                        device=name,
                        port=port.port,
                        found=port.gids,
                    )
                entry = select_gid(port, address, netdev_name)
            except GidSelectionError as exc:
                results.append(_unresolved(name, port.port, exc, **facts))
                continue
            results.append(
                PortResolution(
                    device=name,
                    port=port.port,
                    gid_index=entry.index,
                    gid=entry.address,
                    error=None,
                    **facts,
                )
            )
    return results


class NodeResolution(BaseModel):
    """A node's NCCL_IB_GID_INDEX: agreed by every listed port, or an error."""

    model_config = _CONFIG

    address: str
    interface: str | None
    expected_gid: str
    hcas: tuple[str, ...]
    ports: tuple[PortResolution, ...]
    gid_index: int | None
    error: dict[str, Any] | None

    @property
    def ok(self) -> bool:
        return self.gid_index is not None and self.error is None


def resolve_node(
    snapshot: SysfsSnapshot,
    address: IPv4Address | str,
    hcas: Sequence[str],
    interface: str | None = None,
) -> NodeResolution:
    """Resolve NCCL_IB_GID_INDEX for a node: every listed HCA port must give the same
    index; a failed port fails the node (NCCL would use the index on it too)."""
    ports = resolve_ports(snapshot, address, hcas, interface)
    error: GidSelectionError | None = None
    failed = [p for p in ports if p.error is not None]
    indexes = sorted({p.gid_index for p in ports if p.gid_index is not None})
    if not hcas:
        error = GidSelectionError(
            "no RDMA devices listed for this node",
            hint="list the node's RoCE devices in fabric.hcas (see `ls /sys/class/infiniband`)",
            kind="no_hcas",
        )
    elif failed:
        first = failed[0].error or {}
        names = ", ".join(f"{p.device}:{p.port}" if p.port else p.device for p in failed)
        error = GidSelectionError(
            f"cannot resolve NCCL_IB_GID_INDEX: {len(failed)} of {len(ports)} listed port(s) "
            f"failed ({names}). First: {first.get('message', '')}",
            hint=str(first.get("hint") or "")
            + (
                "; NCCL uses every device in NCCL_IB_HCA with the same GID index, so list "
                "only devices whose netdev carries the fabric address"
                if len(failed) < len(ports)
                else ""
            ),
            kind=first.get("kind", "not_found"),
            device=failed[0].device,
            port=failed[0].port,
        )
    elif len(indexes) > 1:
        detail = ", ".join(f"{p.device}:{p.port} -> {p.gid_index}" for p in ports)
        error = GidSelectionError(
            f"the listed ports need different GID indexes ({detail}); NCCL_IB_GID_INDEX is "
            "one number for all of them",
            hint="list one device per node in fabric.hcas, or make the GID tables agree",
            kind="disagree",
        )
    return NodeResolution(
        address=str(address),
        interface=interface,
        expected_gid=ipv4_mapped_gid(address),
        hcas=tuple(hcas),
        ports=tuple(ports),
        gid_index=indexes[0] if error is None and indexes else None,
        error=error.to_dict() if error else None,
    )


# --------------------------------------------------------------------------- drift

DriftStatus = Literal["ok", "drift", "unset", "invalid", "unresolvable"]


class GidDrift(BaseModel):
    """A recorded NCCL_IB_GID_INDEX compared with a fresh resolution from sysfs."""

    model_config = _CONFIG

    status: DriftStatus
    recorded: str | None
    current: int | None
    message: str
    hint: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def recorded_gid_index(env: Mapping[str, str]) -> str | None:
    """NCCL_IB_GID_INDEX from a running configuration (an env file, /proc/PID/environ)."""
    return env.get("NCCL_IB_GID_INDEX")


def gid_drift(recorded: str | int | None, fresh: NodeResolution) -> GidDrift:
    """Compare what the engine was started with against what sysfs says now."""
    rec = None if recorded is None else str(recorded).strip()
    current = fresh.gid_index
    restart = "restart the engine on this node: its launch script resolves the index again"
    if not fresh.ok:
        message = (fresh.error or {}).get("message", "GID resolution failed")
        return GidDrift(
            status="unresolvable",
            recorded=rec,
            current=None,
            message=f"sysfs no longer yields a GID index: {message}",
            hint=str((fresh.error or {}).get("hint") or "") or None,
        )
    if not rec:
        return GidDrift(
            status="unset",
            recorded=rec,
            current=current,
            message="NCCL_IB_GID_INDEX is unset or empty in the running configuration: "
            f"NCCL falls back to index 0 (a link-local GID), not {current}",
            hint=restart,
        )
    if not rec.isdigit():
        return GidDrift(
            status="invalid",
            recorded=rec,
            current=current,
            message=f"NCCL_IB_GID_INDEX={rec!r} is not an index (sysfs says {current})",
            hint=restart,
        )
    if int(rec) != current:
        return GidDrift(
            status="drift",
            recorded=rec,
            current=current,
            message=f"GID index drifted: running with {rec}, sysfs now says {current} "
            f"(::ffff:{fresh.address})",
            hint=restart,
        )
    return GidDrift(
        status="ok", recorded=rec, current=current, message=f"GID index {current} unchanged"
    )
