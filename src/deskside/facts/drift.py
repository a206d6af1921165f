"""What must be the same on every node of one engine, and how a difference is told (pure).

Two nodes of one engine exchange tensors through NCCL: both must load the same NCCL build
(an all-reduce between two builds can hang without an error), run the same NVIDIA driver
and CUDA, and the same vLLM (or image); their fabric interfaces need one MTU (larger frames
from one side are dropped by the other) and carrier. Any of these differing is a `problem`:
`up` refuses. A different kernel or deskside is a `warning`: it does not break the engine
by itself but usually means one node was updated and the other not. Clocks further apart
than `CLOCK_SKEW_LIMIT` are a problem too.

A value a node does not have is `NONE` (and compared: one node without a driver differs
from one with); a value that could not be read is None (left out of the comparison).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from deskside.facts.base import Unread
from deskside.facts.clock import NodeClock, skew
from deskside.facts.network import Link
from deskside.facts.versions import HostVersions

Severity = Literal["problem", "warning", "info"]
NONE = "none"

# Time sync (chrony, systemd-timesyncd) keeps nodes on one network within milliseconds, so
# clocks a second apart mean a node does not sync; its engine log and metrics can then not
# be lined up with the other's when a hang is investigated, and the gap only grows. The
# measurement's own error (half the round trip, per node) is subtracted before comparing.
CLOCK_SKEW_LIMIT = 1.0  # seconds


@dataclass(frozen=True)
class Shared:
    """One node's values of what must match; None: unknown (not read)."""

    kernel: str | None = None
    driver: str | None = None
    cuda: str | None = None
    nccl: str | None = None  # the path the engine loads, or NONE
    nccl_sha256: str | None = None  # or NONE (no library), "missing" (path unreadable)
    nccl_file: str | None = None  # the file behind the path (links resolved)
    vllm: str | None = None
    deskside: str | None = None
    interface: str | None = None  # the fabric interface
    mtu: int | None = None
    link_up: bool | None = None


def shared(
    versions: HostVersions | Unread, links: dict[str, Link] | Unread | None, interface: str | None
) -> Shared:
    """The values from the facts a node answered. `interface`: its fabric interface (the
    caller's choice: the configured one, else the one carrying the node's address)."""
    out = Shared(interface=interface)
    if not isinstance(links, Unread) and links is not None and interface is not None:
        link = links.get(interface)
        if link is not None:
            out = replace(out, mtu=link.mtu, link_up=link.up)
    if isinstance(versions, Unread):
        return out
    py = versions.python
    ran = py is not None and py.version is not None
    lib = versions.nccl
    if lib is None:
        nccl = sha = file = None
    elif lib.path is None:
        nccl, sha, file = NONE, NONE, None
    else:
        nccl, sha, file = lib.path, lib.sha256 if lib.readable else "missing", lib.file
    return replace(
        out,
        kernel=versions.kernel or NONE,
        driver=versions.driver or NONE,
        cuda=versions.cuda or NONE,
        nccl=nccl,
        nccl_sha256=sha,
        nccl_file=file,
        vllm=((py.vllm if py else None) or NONE) if ran else None,
        deskside=((py.deskside_version if py else None) or NONE) if ran else None,
    )


@dataclass(frozen=True)
class NodeShared:
    """One node's values and its clock against this machine's."""

    node: str
    values: Shared
    skew: float | None = None  # node clock - midpoint of the local send and receive times
    skew_error: float = 0.0  # +- half the round trip
    synced: bool | None = None  # the node says its clock is synchronized


def measured(
    node: str, values: Shared, clock: NodeClock | Unread | None, sent: float, received: float
) -> NodeShared:
    if clock is None or isinstance(clock, Unread):
        return NodeShared(node, values)
    offset, error = skew(clock, sent, received)
    return NodeShared(node, values, offset, error, clock.synced)


@dataclass(frozen=True)
class Difference:
    """What differs (or, `kind` "match", what is the same): `node` names every node it
    concerns, `fix` what to do."""

    kind: str
    node: str
    what: str
    severity: Severity
    fix: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def _nccl(f: Shared) -> str:
    if f.nccl == NONE:
        return "none found"
    return f"{f.nccl} sha256 {f.nccl_sha256}" + (
        f" ({f.nccl_file})" if f.nccl_file and f.nccl_file != f.nccl else ""
    )


@dataclass(frozen=True)
class Key:
    name: str
    title: str
    severity: Severity
    value: Callable[[Shared], object]  # what is compared (None: unknown)
    shown: Callable[[Shared], str]
    fix: str


KEYS: tuple[Key, ...] = (
    Key(
        "nccl",
        "NCCL library",
        "problem",
        lambda f: f.nccl_sha256 if f.nccl is not None else None,
        _nccl,
        "make every node load the same NCCL build: the same nvidia-nccl wheel in the "
        "engine's Python, or the same file at VLLM_NCCL_SO_PATH (compare with sha256sum)",
    ),
    Key(
        "driver",
        "NVIDIA driver",
        "problem",
        lambda f: f.driver,
        lambda f: str(f.driver),
        "install the same NVIDIA driver on every node and reboot "
        "(cat /proc/driver/nvidia/version shows it)",
    ),
    Key(
        "cuda",
        "CUDA version",
        "problem",
        lambda f: f.cuda,
        lambda f: str(f.cuda),
        "install the same NVIDIA driver on every node (it sets the CUDA version) and reboot",
    ),
    Key(
        "vllm",
        "vLLM",
        "problem",
        lambda f: f.vllm,
        lambda f: str(f.vllm),
        "install the recipe's vLLM version in the engine's Python on every node",
    ),
    Key(
        "mtu",
        "fabric MTU",
        "problem",
        lambda f: f.mtu,
        lambda f: f"{f.mtu} ({f.interface})",
        "set the same MTU on every fabric interface (ip link set dev IFACE mtu 9000, and in "
        "the network configuration); deskside fabric check RECIPE tests it",
    ),
    Key(
        "kernel",
        "kernel",
        "warning",
        lambda f: f.kernel,
        lambda f: str(f.kernel),
        "update every node to the same kernel and reboot",
    ),
    Key(
        "deskside",
        "deskside",
        "warning",
        lambda f: f.deskside,
        lambda f: str(f.deskside),
        "install the same deskside version on every node",
    ),
)


def _everyone(nodes: Sequence[NodeShared]) -> str:
    return ", ".join(n.node for n in nodes)


def compare(nodes: Sequence[NodeShared]) -> list[Difference]:
    """What differs between the nodes: a `drift` per key, `clock` for clocks too far apart,
    `fabric` per node whose interface has no carrier, and one `match` listing what is the
    same. Unknown values (None) are left out of a comparison."""
    if len(nodes) < 2:
        return []
    out: list[Difference] = []
    same: list[str] = []
    for key in KEYS:
        values = {n.node: key.value(n.values) for n in nodes}
        if any(v is None for v in values.values()):
            continue
        if len(set(values.values())) == 1:
            same.append(f"{key.title} {key.shown(nodes[0].values)}")
            continue
        shown = ", ".join(f"{n.node} {key.shown(n.values)}" for n in nodes)
        out.append(
            Difference(
                kind="drift",
                node=_everyone(nodes),
                what=f"{key.title} differs: {shown}",
                severity=key.severity,
                fix=key.fix,
                detail={"key": key.name, "values": {k: str(v) for k, v in values.items()}},
            )
        )
    out += _clock(nodes)
    for n in nodes:
        if n.values.link_up is False:
            out.append(
                Difference(
                    kind="fabric",
                    node=n.node,
                    what=f"fabric interface {n.values.interface} on {n.node} has no carrier",
                    severity="problem",
                    fix=f"ip link set dev {n.values.interface} up, and check the cable; "
                    "deskside fabric check RECIPE tests the fabric",
                )
            )
    if same:
        out.append(
            Difference(
                kind="match",
                node=_everyone(nodes),
                what="the same on every node: " + "; ".join(same),
                severity="info",
            )
        )
    return out


def _clock(nodes: Sequence[NodeShared]) -> list[Difference]:
    timed = [n for n in nodes if n.skew is not None]
    if len(timed) < 2:
        return []
    early = min(timed, key=lambda n: n.skew or 0.0)
    late = max(timed, key=lambda n: n.skew or 0.0)
    assert early.skew is not None and late.skew is not None
    gap = late.skew - early.skew
    if gap - early.skew_error - late.skew_error <= CLOCK_SKEW_LIMIT:
        return []
    shown = ", ".join(f"{n.node} {n.skew:+.2f} s" for n in timed)
    unsynced = [n.node for n in timed if n.synced is False]
    return [
        Difference(
            kind="clock",
            node=_everyone(timed),
            what=f"clocks differ by {gap:.1f} s ({shown}, against this machine's)"
            + (f"; not synchronized: {', '.join(unsynced)}" if unsynced else ""),
            severity="problem",
            fix="enable time sync on every node: timedatectl set-ntp true "
            "(chronyc tracking or timedatectl show the offset)",
            detail={
                "skew_seconds": {n.node: round(n.skew or 0.0, 3) for n in timed},
                "synchronized": {n.node: n.synced for n in timed},
            },
        )
    ]


def refusal(differences: Sequence[Difference], more: str) -> tuple[list[Difference], list[str]]:
    """For `up`'s preflight: the problems (each one's fix followed by `more`, where to see
    the whole list) and the warnings as notes; `info` is left out."""
    problems = [
        replace(d, fix=f"{d.fix}; {more}" if d.fix else more)
        for d in differences
        if d.severity == "problem"
    ]
    notes = [
        f"{d.what} ({d.fix})" if d.fix else d.what for d in differences if d.severity == "warning"
    ]
    return problems, notes


def refusal_text(problems: Sequence[Difference]) -> tuple[str, str]:
    """The message and hint `up` refuses with."""
    lines = [f"{d.node}: {d.what}" for d in problems]
    hints = [d.fix for d in problems if d.fix]
    return (
        "the nodes differ in what they must share:\n  " + "\n  ".join(lines),
        "\n  ".join(dict.fromkeys(hints)),
    )
