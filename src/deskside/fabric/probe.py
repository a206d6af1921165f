"""Fabric probes, each a command (argv) plus a pure parser of what it printed.

- the interface: `ip -j addr show` (exists, carrier, MTU, IPv4 addresses) and its link
  speed from sysfs;
- a don't-fragment ping at the full MTU (`ping -M do -s MTU-28`);
- an all-reduce through torch.distributed (gloo on CPU nodes, NCCL on GPU nodes) with its
  bus bandwidth as nccl-tests defines it;
- `ib_write_bw` (perftest) between two RDMA devices, when installed.

Nothing here runs a command: `deskside.fabric.check` does, through a Transport.
"""

from __future__ import annotations

import json
import re
import shlex
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict

from deskside.fabric.sysfs import SysfsError
from deskside.facts.base import FactError
from deskside.facts.network import Link, parse_links
from deskside.transport.base import Result

_CONFIG = ConfigDict(extra="forbid", frozen=True)

IP_ICMP_HEADERS = 28  # IPv4 header (20) + ICMP echo header (8)
RECOMMENDED_MTU = 9000

# --------------------------------------------------------------------------- interfaces


def addr_command() -> list[str]:
    """Every interface with its addresses, as JSON (iproute2)."""
    return ["ip", "-j", "addr", "show"]


def parse_ip_addr_json(text: str) -> dict[str, Link]:
    """Parse `ip -j addr show [dev X]` output: interface name -> Link (the network fact's
    parser, with the fabric commands' own error and hint)."""
    try:
        return parse_links(text)
    except FactError as exc:
        raise SysfsError(
            f"cannot parse `ip -j addr` output: {exc}",
            hint="pass the output of `ip -j addr show` (iproute2 with JSON support)",
        ) from None


def parse_addr(result: Result) -> dict[str, Link]:
    """`addr_command()`'s output; {} when it failed (the caller reports the interface
    missing)."""
    if not result.ok:
        return {}
    return parse_ip_addr_json(result.stdout)


def interface_for_address(links: dict[str, Link], address: str) -> str | None:
    """The interface carrying `address` (nodes without fabric.interface)."""
    for link in links.values():
        if link.has_address(address):
            return link.name
    return None


def speed_command(interface: str) -> list[str]:
    """The interface's link speed in Mb/s as the kernel reports it."""
    return ["cat", f"/sys/class/net/{interface}/speed"]


def parse_speed_gbps(result: Result) -> float | None:
    """Gb/s, or None when unknown (not running, -1, or a virtual device without one)."""
    text = result.stdout.strip()
    if not result.ok or not re.fullmatch(r"[0-9]+", text) or int(text) <= 0:
        return None
    return int(text) / 1000.0


# --------------------------------------------------------------------------- ping


def ping_command(
    interface: str, destination: str, mtu: int, count: int = 3, interval: float = 0.2
) -> list[str]:
    """A don't-fragment ping whose packets are exactly `mtu` bytes on the wire (IPv4)."""
    return [
        "ping",
        "-n",
        "-M",
        "do",
        "-s",
        str(mtu - IP_ICMP_HEADERS),
        "-c",
        str(count),
        "-i",
        f"{interval:g}",
        "-W",
        "1",
        "-I",
        interface,
        destination,
    ]


class PingResult(BaseModel):
    """What a ping run showed."""

    model_config = _CONFIG

    transmitted: int | None
    received: int | None
    loss_percent: float | None
    rtt_avg_ms: float | None
    too_big: bool  # the sender refused: the packet exceeds a local MTU
    path_mtu: int | None  # MTU reported by the error, when there was one
    message: str

    @property
    def ok(self) -> bool:
        return bool(self.transmitted) and self.received == self.transmitted


_PING_STATS = re.compile(
    r"(\d+) packets transmitted, (\d+) (?:packets )?received.*?([0-9.]+)% packet loss"
)
_PING_RTT = re.compile(r"= [0-9.]+/([0-9.]+)/")
_PING_MTU = re.compile(r"mtu ?=? ?(\d+)", re.IGNORECASE)


def parse_ping(result: Result) -> PingResult:
    """Parse iputils ping output (exit 1 = no reply, 2 = error)."""
    text = result.stdout + "\n" + result.stderr
    stats = _PING_STATS.search(text)
    rtt = _PING_RTT.search(text)
    too_big = bool(re.search(r"message too long|frag needed", text, re.IGNORECASE))
    mtu = _PING_MTU.search(text) if too_big else None
    tx = int(stats.group(1)) if stats else None
    rx = int(stats.group(2)) if stats else None
    if tx and rx == tx:
        message = f"{rx}/{tx} replies" + (f", avg {rtt.group(1)} ms" if rtt else "")
    elif too_big:
        message = "packet larger than the path MTU" + (f" (mtu {mtu.group(1)})" if mtu else "")
    elif stats:
        message = f"{rx}/{tx} replies ({stats.group(3)}% loss)"
    else:
        last = [ln for ln in text.splitlines() if ln.strip()]
        message = last[-1].strip() if last else f"ping failed (exit {result.rc})"
    return PingResult(
        transmitted=tx,
        received=rx,
        loss_percent=float(stats.group(3)) if stats else None,
        rtt_avg_ms=float(rtt.group(1)) if rtt else None,
        too_big=too_big,
        path_mtu=int(mtu.group(1)) if mtu else None,
        message=message,
    )


# --------------------------------------------------------------------------- all-reduce


def allreduce_source() -> str:
    """The rank program (`deskside/fabric/_allreduce.py`), sent to nodes as `python -c`."""
    return resources.files("deskside.fabric").joinpath("_allreduce.py").read_text()


def allreduce_command(
    python: str,
    *,
    backend: str,
    master_addr: str,
    master_port: int,
    rank: int,
    world_size: int,
    size_bytes: int,
    iterations: int,
    warmup: int,
    timeout: float,
) -> list[str]:
    """One rank of the all-reduce probe. `python` may carry a prefix (e.g. `docker exec
    vllm python3`): it is split like a shell word list."""
    return [
        *shlex.split(python),
        "-c",
        allreduce_source(),
        "--backend",
        backend,
        "--master-addr",
        master_addr,
        "--master-port",
        str(master_port),
        "--rank",
        str(rank),
        "--world-size",
        str(world_size),
        "--size-bytes",
        str(size_bytes),
        "--iterations",
        str(iterations),
        "--warmup",
        str(warmup),
        "--timeout",
        f"{timeout:g}",
    ]


class AllReduceRank(BaseModel):
    """One rank's report."""

    model_config = _CONFIG

    rank: int | None
    ok: bool
    correct: bool | None = None
    size_bytes: int | None = None
    iterations: int | None = None
    seconds_per_iteration: float | None = None
    rendezvous_seconds: float | None = None
    error: str | None = None


def parse_allreduce(result: Result, rank: int | None = None) -> AllReduceRank:
    """The JSON line a rank printed; a failure report when there is none."""
    for line in reversed(result.stdout.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            data: Any = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and "ok" in data:
            fields = set(AllReduceRank.model_fields)
            return AllReduceRank.model_validate({k: v for k, v in data.items() if k in fields})
    tail = " | ".join(ln.strip() for ln in result.stderr.splitlines()[-3:] if ln.strip())
    why = "timed out" if result.rc == 124 else f"exit {result.rc}"
    return AllReduceRank(rank=rank, ok=False, error=f"no report from the rank ({why}): {tail}")


def bus_bandwidth_gbps(size_bytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """(algorithm, bus) bandwidth in Gbit/s, as nccl-tests defines them for all-reduce:
    algbw = size / time, busbw = algbw * 2 (n - 1) / n."""
    if seconds <= 0:
        return 0.0, 0.0
    alg = size_bytes * 8 / seconds / 1e9
    return alg, alg * 2 * (world_size - 1) / world_size


# --------------------------------------------------------------------------- ib_write_bw


def perftest_command() -> list[str]:
    return ["sh", "-c", "command -v ib_write_bw"]


def ib_write_bw_command(
    device: str,
    port: int,
    gid_index: int,
    server: str | None = None,
    *,
    tcp_port: int = 18515,
    duration: int = 5,
    qps: int = 4,
) -> list[str]:
    """Server side (server=None) or client side of a perftest RDMA write bandwidth run."""
    argv = [
        "ib_write_bw",
        "-d",
        device,
        "-i",
        str(port),
        "-x",
        str(gid_index),
        "-F",
        "--report_gbits",
        "-D",
        str(duration),
        "-q",
        str(qps),
        "-p",
        str(tcp_port),
    ]
    return [*argv, server] if server else argv


_IB_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$", re.MULTILINE)


def parse_ib_write_bw(text: str) -> float | None:
    """BW average [Gb/sec] from ib_write_bw's result row (`--report_gbits`)."""
    rows = _IB_ROW.findall(text)
    if not rows:
        return None
    return float(rows[-1][3])
