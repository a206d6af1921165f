"""RDMA devices, ports and GID tables as Linux shows them under `/sys`, read from any root.

The reader is a pure function of a *source*: a directory laid out like `/sys` (the live
system, a copied snapshot, a test fixture) or the text dump that
`deskside.fabric.sysfs_dump.dump_command()` prints on a remote node. Nothing here runs
commands or reads the environment.

What it reads, per device `class/infiniband/<dev>`:

- `device/net/<netdev>`: the netdev(s) of the device's PCI function;
- `ports/<n>/{state,rate,link_layer}`: e.g. `4: ACTIVE`, `200 Gb/sec (4X HDR)`, `Ethernet`;
- `ports/<n>/gids/<i>`: the GID table, 8 groups of 4 hex digits; all zeros = unused;
- `ports/<n>/gid_attrs/types/<i>`: `IB/RoCE v1` or `RoCE v2`;
- `ports/<n>/gid_attrs/ndevs/<i>`: the netdev the entry was made from;

and per netdev `class/net/<netdev>/{mtu,operstate,speed}`. IPv4 addresses are not in sysfs:
they come from `ip -j addr` output, parsed by `parse_ip_addr_json`.

Every value is read the way POSIX `read -r` reads it (first line, blanks trimmed), so the
launch-time shell snippet (`deskside.fabric.launch_sh`) sees exactly what Python sees.

A directory tree is not trusted (`DirSource`): sysfs is made of links, so links are
followed, but only while they stay inside the root (the whole of it resolved first); a link
leading out of it, a link loop, a FIFO, socket or device where a value should be, a value
over 64 KiB, a directory of more than 4,096 entries, a name that is not UTF-8 or holds
control characters, more than 100,000 paths looked at or more than 30 s spent are each a
`SysfsTreeError` (exit 2) naming the path. What stays a clean answer: an absent or
unreadable file (None, as the kernel's EINVAL on unpopulated `gid_attrs` entries), a
directory where a value should be (None), a value that is not UTF-8 (read with U+FFFD in
place of the bad bytes), and names that are not numbers where numbers are expected
(skipped).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from deskside.errors import DesksideError, Location, UsageError
from deskside.smallfile import FileTooLarge, NotRegularFile, read_small_file

ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
_CONFIG = ConfigDict(extra="forbid", frozen=True)


class SysfsError(DesksideError):
    """A sysfs snapshot or `ip` output deskside cannot read."""


class SysfsTreeError(UsageError, SysfsError):
    """A directory given as a sysfs tree that is not one: the path and what is wrong."""


MAX_VALUE_BYTES = 64 << 10  # a sysfs attribute is at most a page; 64 KiB is generous
MAX_ENTRIES = 4096  # per directory: a GID table has 256 slots, a host a few dozen devices
MAX_PATHS = 100_000  # paths looked at per tree: 128 virtual functions x 256 GIDs fit
MAX_SECONDS = 30.0


# --------------------------------------------------------------------------- sources


class SysfsSource(Protocol):
    """Read-only access to a tree laid out like `/sys` (paths relative to its root)."""

    def read(self, rel: str) -> str | None:
        """The file's text, or None when it is absent or cannot be read."""
        ...

    def listdir(self, rel: str) -> list[str]:
        """Names in a directory (sorted), empty when it is absent."""
        ...

    def describe(self) -> str:
        """Where the tree comes from, for messages."""
        ...


class _Walk:
    """What a DirSource has looked at so far: paths and time, both bounded."""

    def __init__(self) -> None:
        self.paths = 0
        self.started: float | None = None

    def tick(self, root: Path, rel: str) -> None:
        now = time.monotonic()
        if self.started is None:
            self.started = now
        self.paths += 1
        if self.paths > MAX_PATHS:
            raise SysfsTreeError(
                f"more than {MAX_PATHS:,} paths looked at: not a sysfs tree",
                hint="point --sysfs-root at /sys or at a copy of its class/infiniband and "
                "class/net parts",
                location=Location(str(root / rel)),
            )
        if now - self.started > MAX_SECONDS:
            raise SysfsTreeError(
                f"reading the tree took more than {MAX_SECONDS:.0f} s",
                hint="point --sysfs-root at /sys or at a local copy of it",
                location=Location(str(root / rel)),
            )


def _name_problem(name: str) -> str | None:
    """Why a directory entry cannot be a sysfs name (the kernel's names are plain text)."""
    try:
        name.encode()
    except UnicodeEncodeError:
        return "a name that is not UTF-8"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in name):
        return "a name with control characters"
    return None


@dataclass(frozen=True)
class DirSource:
    """A directory laid out like `/sys`: the live `/sys`, a snapshot or a test fixture.

    Read defensively (see the module docstring): links only within the root, regular files
    of at most MAX_VALUE_BYTES, bounded listings, paths and time."""

    root: Path
    _walk: _Walk = field(default_factory=_Walk, init=False, compare=False, repr=False)

    def _refuse(self, rel: str, what: str, hint: str) -> SysfsTreeError:
        return SysfsTreeError(what, hint=hint, location=Location(str(self.root / rel)))

    def _inside(self, rel: str) -> str | None:
        """The real path of `rel` when it exists inside the root; None when it is absent."""
        self._walk.tick(self.root, rel)
        try:
            root = os.path.realpath(self.root, strict=True)
            real = os.path.realpath(os.path.join(root, rel), strict=True)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._refuse(
                    rel,
                    "a loop of symbolic links",
                    "sysfs links never loop: fix or remove the link in the copied tree",
                ) from None
            return None  # absent (or a dangling link), or not searchable
        if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
            raise self._refuse(
                rel,
                f"a symbolic link leading out of the tree (to {real})",
                f"links in a sysfs tree stay inside it ({self.root}); copy the tree with "
                "relative links, or point --sysfs-root at /sys",
            )
        return real

    def read(self, rel: str) -> str | None:
        path = self._inside(rel)
        if path is None:
            return None
        try:
            data = read_small_file(path, MAX_VALUE_BYTES, follow=False)
        except NotRegularFile as exc:
            if exc.is_dir:
                return None
            raise self._refuse(
                rel,
                f"{exc.kind} where a sysfs value should be",
                "sysfs values are small regular files: remove it from the copied tree",
            ) from None
        except FileTooLarge:
            raise self._refuse(
                rel,
                f"a value larger than {MAX_VALUE_BYTES // 1024} KiB",
                "sysfs values are at most a page long: this is not a sysfs file",
            ) from None
        except OSError:  # unreadable, or EINVAL (unpopulated gid_attrs entries)
            return None
        return data.decode(errors="replace")

    def listdir(self, rel: str) -> list[str]:
        path = self._inside(rel)
        if path is None:
            return []
        names: list[str] = []
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    problem = _name_problem(entry.name)
                    if problem is not None:
                        raise self._refuse(
                            f"{rel}/{entry.name!r}",
                            problem,
                            "the kernel names devices, ports and GIDs in plain text: remove "
                            "the entry from the copied tree",
                        )
                    names.append(entry.name)
                    if len(names) > MAX_ENTRIES:
                        raise self._refuse(
                            rel,
                            f"a directory of more than {MAX_ENTRIES:,} entries",
                            "not a sysfs directory: point --sysfs-root at /sys or a copy of it",
                        )
        except OSError:  # absent, not a directory, not readable
            return []
        return sorted(names)

    def describe(self) -> str:
        return str(self.root)


def read_value(source: SysfsSource, rel: str) -> str | None:
    """A sysfs value as `IFS=' \\t' read -r v < file` sees it: the first line, spaces and
    tabs trimmed. None when the file is absent or unreadable; "" when it is empty."""
    text = source.read(rel)
    if text is None:
        return None
    return text.split("\n", 1)[0].strip(" \t")


# --------------------------------------------------------------------------- models


class GidEntry(BaseModel):
    """One populated row of a port's GID table."""

    model_config = _CONFIG

    index: int
    gid: str  # as sysfs writes it (8 groups of 4 hex digits); "" when the file was empty
    gid_type: str | None  # "RoCE v2", "IB/RoCE v1"; None when unreadable
    ndev: str | None  # netdev the entry belongs to; None when unreadable

    @property
    def address(self) -> str | None:
        """The GID as an address: `::ffff:192.168.100.1`, `fe80::...`; None if malformed."""
        try:
            ip = ipaddress.IPv6Address(self.gid)
        except ValueError:
            return None
        if ip.ipv4_mapped is not None:
            return f"::ffff:{ip.ipv4_mapped}"
        return str(ip)

    @property
    def ipv4(self) -> str | None:
        """The IPv4 address of an IPv4-mapped GID (RoCE over IPv4), else None."""
        try:
            mapped = ipaddress.IPv6Address(self.gid).ipv4_mapped
        except ValueError:
            return None
        return None if mapped is None else str(mapped)

    def describe(self) -> str:
        shown = self.address or (repr(self.gid) if self.gid else "(empty)")
        kind = self.gid_type if self.gid_type else "type unreadable"
        ndev = self.ndev if self.ndev else "netdev unreadable"
        return f"[{self.index}] {shown} {kind} on {ndev}"


class RdmaPort(BaseModel):
    """A port of an RDMA device."""

    model_config = _CONFIG

    device: str
    port: int
    state: str | None  # raw, e.g. "4: ACTIVE"
    rate: str | None  # raw, e.g. "200 Gb/sec (4X HDR)"
    link_layer: str | None  # "Ethernet" for RoCE, "InfiniBand"
    gids: tuple[GidEntry, ...]

    @property
    def state_name(self) -> str | None:
        """`ACTIVE`, `DOWN`, `INIT`...; None when unreadable or empty."""
        if not self.state:
            return None
        return self.state.split(":", 1)[-1].strip() or None

    @property
    def active(self) -> bool:
        return self.state_name == "ACTIVE"

    @property
    def rate_gbps(self) -> float | None:
        return parse_rate_gbps(self.rate)


class RdmaDevice(BaseModel):
    """An RDMA device (`/sys/class/infiniband/<name>`) and its ports."""

    model_config = _CONFIG

    name: str
    netdevs: tuple[str, ...]  # from device/net/: normally exactly one
    ports: tuple[RdmaPort, ...]

    @property
    def netdev(self) -> str | None:
        return self.netdevs[0] if len(self.netdevs) == 1 else None


class Netdev(BaseModel):
    """A network interface: sysfs facts, plus IPv4 addresses when `ip` output was given."""

    model_config = _CONFIG

    name: str
    exists: bool
    mtu: int | None = None
    operstate: str | None = None  # "up", "down", "unknown"... (sysfs is lowercase)
    speed_mbps: int | None = None  # None when unknown (sysfs -1 or unreadable)
    ipv4: tuple[str, ...] | None = None  # "a.b.c.d/len"; None = not known (no ip facts)


class SysfsSnapshot(BaseModel):
    """Everything the GID selection and `deskside fabric show` need from one node."""

    model_config = _CONFIG

    source: str
    devices: tuple[RdmaDevice, ...]
    netdevs: dict[str, Netdev]

    def device(self, name: str) -> RdmaDevice | None:
        for dev in self.devices:
            if dev.name == name:
                return dev
        return None


# --------------------------------------------------------------------------- parsing

_RATE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec")


def parse_rate_gbps(rate: str | None) -> float | None:
    """`200 Gb/sec (4X HDR)` -> 200.0; None when absent or not in that form."""
    if not rate:
        return None
    m = _RATE.match(rate)
    return float(m.group(1)) if m else None


def _int_or_none(text: str | None) -> int | None:
    if text is None or not re.fullmatch(r"-?[0-9]+", text):
        return None
    return int(text)


def _numeric(names: Iterable[str]) -> list[int]:
    """The names that are decimal numbers (ASCII digits: `int` takes other digits too)."""
    return sorted(int(n) for n in names if n.isascii() and n.isdigit() and len(n) < 10)


def read_port(source: SysfsSource, device: str, port: int) -> RdmaPort:
    base = f"class/infiniband/{device}/ports/{port}"
    gids: list[GidEntry] = []
    for index in _numeric(source.listdir(f"{base}/gids")):
        raw = read_value(source, f"{base}/gids/{index}")
        if raw is None or raw.lower() == ZERO_GID:
            continue  # absent, unreadable, or an unused slot
        gids.append(
            GidEntry(
                index=index,
                gid=raw,
                gid_type=read_value(source, f"{base}/gid_attrs/types/{index}") or None,
                ndev=read_value(source, f"{base}/gid_attrs/ndevs/{index}") or None,
            )
        )
    return RdmaPort(
        device=device,
        port=port,
        state=read_value(source, f"{base}/state"),
        rate=read_value(source, f"{base}/rate"),
        link_layer=read_value(source, f"{base}/link_layer"),
        gids=tuple(gids),
    )


def read_device(source: SysfsSource, name: str) -> RdmaDevice:
    base = f"class/infiniband/{name}"
    ports = tuple(read_port(source, name, n) for n in _numeric(source.listdir(f"{base}/ports")))
    return RdmaDevice(name=name, netdevs=tuple(source.listdir(f"{base}/device/net")), ports=ports)


def _netdev_name_ok(name: str) -> bool:
    """A name Linux could give an interface: 1-15 bytes, no `/`, blank or control
    character, not `.` or `..` (`dev_valid_name` in the kernel)."""
    return (
        0 < len(name.encode(errors="replace")) < 16
        and name not in (".", "..")
        and not any(c == "/" or c == ":" or c.isspace() or ord(c) < 0x20 for c in name)
    )


class IpLink(Protocol):
    """What a netdev takes of `ip -j addr` (`deskside.facts.network.Link`)."""

    @property
    def mtu(self) -> int | None: ...

    @property
    def operstate(self) -> str | None: ...

    @property
    def ipv4(self) -> tuple[str, ...]: ...


def read_netdev(
    source: SysfsSource, name: str, ip_addrs: Mapping[str, IpLink] | None = None
) -> Netdev:
    link = ip_addrs.get(name) if ip_addrs is not None else None
    if not _netdev_name_ok(name):  # e.g. "../.." from a gid_attrs/ndevs file: not read
        return Netdev(name=name, exists=link is not None)
    base = f"class/net/{name}"
    exists = source.read(f"{base}/mtu") is not None or link is not None
    speed = _int_or_none(read_value(source, f"{base}/speed"))
    mtu = _int_or_none(read_value(source, f"{base}/mtu"))
    return Netdev(
        name=name,
        exists=exists,
        mtu=mtu if mtu is not None else (link.mtu if link else None),
        operstate=read_value(source, f"{base}/operstate")
        or (link.operstate.lower() if link and link.operstate else None),
        speed_mbps=speed if speed is not None and speed > 0 else None,
        ipv4=(link.ipv4 if link else ()) if ip_addrs is not None else None,
    )


def read_snapshot(
    source: SysfsSource,
    ip_addrs: Mapping[str, IpLink] | None = None,
    extra_netdevs: Sequence[str] = (),
) -> SysfsSnapshot:
    """All RDMA devices of `source` and the netdevs they (or `extra_netdevs`) name.

    `ip_addrs` (from `deskside.fabric.probe.parse_ip_addr_json`) adds IPv4 addresses;
    without it they are None.
    """
    if isinstance(source, DirSource):
        source = DirSource(source.root)  # the bounds hold per snapshot
    devices = tuple(read_device(source, n) for n in source.listdir("class/infiniband"))
    names: list[str] = []
    for dev in devices:
        names += dev.netdevs
        for port in dev.ports:
            names += [g.ndev for g in port.gids if g.ndev]
    names += extra_netdevs
    netdevs = {n: read_netdev(source, n, ip_addrs) for n in sorted(set(names))}
    return SysfsSnapshot(source=source.describe(), devices=devices, netdevs=netdevs)
