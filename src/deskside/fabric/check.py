"""`deskside fabric check`: gates across a recipe's nodes, run through their transports.

Gates, in order (each a `Gate` with status pass / warn / fail / skip):

- `link`      per node: the fabric interface exists and has carrier;
- `address`   per node: the fabric address is configured on it;
- `rdma`      per node, transport roce: listed ports ACTIVE and one RoCE v2 GID index;
- `mtu`       the interfaces' MTUs are equal (and equal to `cluster.fabric.mtu` when set);
              below 9000 is a warning;
- `ping`      per ordered pair: a don't-fragment ping at the sender's full MTU;
- `allreduce` an all-reduce through torch.distributed (gloo on CPU nodes, NCCL on GPU
              nodes): correct sums, and bus bandwidth >= a fraction of the link rate;
- `ib_write_bw` per head-worker pair, transport roce, when perftest is installed on both.

The report's `ok` is false when any gate failed; the CLI exits 1 then.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from deskside.engine.launch import node_ip
from deskside.fabric import probe
from deskside.fabric.gid import NodeResolution, resolve_node
from deskside.fabric.nccl import node_fabric_env
from deskside.fabric.sysfs import IpLink, dump_command, parse_dump, read_snapshot
from deskside.recipe.types import Node, Recipe
from deskside.transport.base import Result, Transport

_CONFIG = ConfigDict(extra="forbid", frozen=True)

Status = Literal["pass", "warn", "fail", "skip"]
Progress = Callable[[str], None]

DEFAULT_MIN_FRACTION = {"gloo": 0.10, "nccl": 0.75}
MIB = 1024 * 1024


class CheckOptions(BaseModel):
    """Knobs of `check_fabric` (the CLI's flags)."""

    model_config = _CONFIG

    python: str | None = Field(
        None, description="Interpreter with torch on the nodes (None: runtime.python, else ours)."
    )
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    port: int | None = Field(
        None, description="Rendezvous port (None: cluster.fabric.master_port)."
    )
    size_bytes: int = 64 * MIB
    iterations: int = 5
    warmup: int = 2
    min_fraction: float | None = Field(
        None, description="Pass threshold: bus bandwidth / link rate (None: per backend)."
    )
    min_busbw_gbps: float | None = None
    timeout: float = 120.0
    ping_count: int = 3
    bandwidth: bool = True
    ib_write_bw: bool = True
    sysfs_root: str = "/sys"


class Gate(BaseModel):
    model_config = _CONFIG

    gate: str
    status: Status
    node: str | None = None
    peer: str | None = None
    message: str
    data: dict[str, Any] = Field(default_factory=dict)


class NodeFacts(BaseModel):
    model_config = _CONFIG

    name: str
    role: str
    rank: int
    transport: str
    interface: str | None
    address: str
    exists: bool
    up: bool
    operstate: str | None
    mtu: int | None
    ipv4: tuple[str, ...]
    speed_gbps: float | None
    rdma: NodeResolution | None = None
    perftest: bool | None = None
    error: str | None = None


class AllReduceReport(BaseModel):
    model_config = _CONFIG

    backend: str
    world_size: int
    master: str
    size_bytes: int
    iterations: int
    seconds_per_iteration: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    link_gbps: float | None
    fraction_of_link: float | None
    min_fraction: float
    min_busbw_gbps: float | None
    correct: bool | None
    ranks: tuple[probe.AllReduceRank, ...]


class IbWriteBwReport(BaseModel):
    model_config = _CONFIG

    server: str
    client: str
    device: str
    port: int
    bw_gbps: float | None
    link_gbps: float | None
    fraction_of_link: float | None


class CheckReport(BaseModel):
    model_config = _CONFIG

    recipe: str
    transport: str
    ok: bool
    nodes: tuple[NodeFacts, ...]
    gates: tuple[Gate, ...]
    allreduce: AllReduceReport | None
    ib_write_bw: tuple[IbWriteBwReport, ...]
    seconds: float


# --------------------------------------------------------------------------- facts


def _gather(recipe: Recipe, node: Node, rank: int, t: Transport, opts: CheckOptions) -> NodeFacts:
    address = node_ip(node)
    roce = recipe.cluster.fabric.transport == "roce"
    links = probe.parse_addr(t.run(probe.addr_command(), timeout=30))
    interface = node.fabric.interface if node.fabric else None
    interface = interface or probe.interface_for_address(links, address)
    link: IpLink | None = links.get(interface) if interface else None
    speed = (
        probe.parse_speed_gbps(t.run(probe.speed_command(interface), timeout=30))
        if interface and link
        else None
    )
    rdma: NodeResolution | None = None
    perftest: bool | None = None
    error: str | None = None
    if not links:
        error = "could not list interfaces (`ip -j addr show` failed on the node)"
    if roce and node.fabric is not None:
        dumped = t.run(dump_command(opts.sysfs_root), timeout=60)
        source = parse_dump(dumped.stdout, origin=f"{t.name}:{opts.sysfs_root}")
        snapshot = read_snapshot(source, links, [node.fabric.interface])
        rdma = resolve_node(snapshot, node.fabric.address, node.fabric.hcas, node.fabric.interface)
        if opts.ib_write_bw:
            perftest = t.run(probe.perftest_command(), timeout=30).ok
    return NodeFacts(
        name=node.name,
        role=node.role,
        rank=rank,
        transport=t.name,
        interface=interface,
        address=address,
        exists=link is not None,
        up=bool(link and link.up),
        operstate=link.operstate if link else None,
        mtu=link.mtu if link else None,
        ipv4=link.ipv4 if link else (),
        speed_gbps=speed,
        rdma=rdma,
        perftest=perftest,
        error=error,
    )


def _node_gates(facts: NodeFacts) -> list[Gate]:
    gates: list[Gate] = []
    n = facts.name
    if not facts.exists:
        why = (
            f"interface {facts.interface} not found"
            if facts.interface
            else f"no interface carries {facts.address}"
        )
        gates.append(Gate(gate="link", status="fail", node=n, message=facts.error or why))
    elif not facts.up:
        gates.append(
            Gate(
                gate="link",
                status="fail",
                node=n,
                message=f"{facts.interface} has no carrier (operstate {facts.operstate})",
            )
        )
    else:
        gates.append(
            Gate(
                gate="link",
                status="pass",
                node=n,
                message=f"{facts.interface} up"
                + (f", {facts.speed_gbps:g} Gb/s" if facts.speed_gbps else ""),
                data={"interface": facts.interface, "speed_gbps": facts.speed_gbps},
            )
        )
    on_it = any(c.split("/", 1)[0] == facts.address for c in facts.ipv4)
    gates.append(
        Gate(
            gate="address",
            status="pass" if on_it else "fail",
            node=n,
            message=f"{facts.address} on {facts.interface}"
            if on_it
            else f"{facts.address} is not configured on {facts.interface} "
            f"(it has {', '.join(facts.ipv4) or 'no IPv4 address'})",
        )
    )
    if facts.rdma is not None:
        r = facts.rdma
        if r.ok:
            ports = ", ".join(
                f"{p.device}:{p.port} {p.state} {p.rate_gbps or '?'} Gb/s" for p in r.ports
            )
            gates.append(
                Gate(
                    gate="rdma",
                    status="pass",
                    node=n,
                    message=f"NCCL_IB_GID_INDEX={r.gid_index} ({ports})",
                    data={"gid_index": r.gid_index},
                )
            )
        else:
            err = r.error or {}
            gates.append(
                Gate(
                    gate="rdma",
                    status="fail",
                    node=n,
                    message=str(err.get("message", "GID resolution failed")),
                    data={"error": err},
                )
            )
    return gates


def _mtu_gate(recipe: Recipe, nodes: list[NodeFacts]) -> Gate:
    mtus = {f.name: f.mtu for f in nodes}
    expected = recipe.cluster.fabric.mtu
    shown = ", ".join(f"{k} {v if v is not None else '?'}" for k, v in mtus.items())
    data: dict[str, Any] = {
        "mtus": mtus,
        "expected": expected,
        "recommended": probe.RECOMMENDED_MTU,
    }
    if any(v is None for v in mtus.values()):
        return Gate(gate="mtu", status="fail", message=f"MTU unknown ({shown})", data=data)
    values = set(mtus.values())
    if len(values) > 1:
        return Gate(
            gate="mtu",
            status="fail",
            message=f"MTU differs between nodes ({shown}): large frames from one side are "
            "dropped by the other; set the same MTU on every fabric interface",
            data=data,
        )
    (mtu,) = values
    assert mtu is not None
    if expected is not None and mtu != expected:
        return Gate(
            gate="mtu",
            status="fail",
            message=f"MTU {mtu} on every node, but the recipe expects {expected}",
            data=data,
        )
    if mtu < probe.RECOMMENDED_MTU:
        return Gate(
            gate="mtu",
            status="warn",
            message=f"MTU {mtu} on every node; {probe.RECOMMENDED_MTU} (jumbo frames) is "
            "recommended for the fabric",
            data=data,
        )
    return Gate(gate="mtu", status="pass", message=f"MTU {mtu} on every node", data=data)


def _ping_gates(
    nodes: list[NodeFacts], transports: Mapping[str, Transport], opts: CheckOptions
) -> list[Gate]:
    gates: list[Gate] = []
    for src in nodes:
        for dst in nodes:
            if src is dst:
                continue
            if not src.exists or src.mtu is None or src.interface is None:
                gates.append(
                    Gate(
                        gate="ping",
                        status="skip",
                        node=src.name,
                        peer=dst.name,
                        message=f"{src.name} has no usable fabric interface",
                    )
                )
                continue
            argv = probe.ping_command(src.interface, dst.address, src.mtu, opts.ping_count)
            result = probe.parse_ping(transports[src.name].run(argv, timeout=30))
            if result.ok:
                status: Status = "pass"
            elif result.received:
                status = "warn"
            else:
                status = "fail"
            gates.append(
                Gate(
                    gate="ping",
                    status=status,
                    node=src.name,
                    peer=dst.name,
                    message=f"{src.address} -> {dst.address} at MTU {src.mtu} "
                    f"(-M do -s {src.mtu - probe.IP_ICMP_HEADERS}): {result.message}",
                    data=result.model_dump(),
                )
            )
    return gates


# --------------------------------------------------------------------------- bandwidth


def _backend(recipe: Recipe, opts: CheckOptions) -> Literal["gloo", "nccl"]:
    if opts.backend != "auto":
        return opts.backend
    return "nccl" if recipe.engine.device == "gpu" else "gloo"


def _link_gbps(recipe: Recipe, nodes: list[NodeFacts]) -> float | None:
    """The slowest node's fabric rate: RDMA port rates (summed over the listed ports) on
    RoCE, the netdev speed otherwise."""
    rates: list[float] = []
    for f in nodes:
        if recipe.cluster.fabric.transport == "roce" and f.rdma is not None:
            port_rates = [p.rate_gbps for p in f.rdma.ports if p.ok and p.rate_gbps]
            if not port_rates:
                return None
            rates.append(sum(r for r in port_rates if r))
        elif f.speed_gbps:
            rates.append(f.speed_gbps)
        else:
            return None
    return min(rates) if rates else None


def _allreduce(
    recipe: Recipe,
    ordered: list[tuple[Node, NodeFacts]],
    transports: Mapping[str, Transport],
    opts: CheckOptions,
) -> tuple[Gate, AllReduceReport]:
    backend = _backend(recipe, opts)
    head_facts = ordered[0][1]
    port = opts.port or recipe.cluster.fabric.master_port
    python = opts.python or recipe.runtime.python or sys.executable
    world = len(ordered)

    def run_rank(item: tuple[Node, NodeFacts]) -> probe.AllReduceRank:
        node, facts = item
        env: dict[str, str] = {}
        if backend == "nccl":
            gid = facts.rdma.gid_index if facts.rdma is not None else None
            env.update(node_fabric_env(recipe, node, gid).env)
            env.update(recipe.cluster.fabric.nccl_env)
        if facts.interface:
            env["GLOO_SOCKET_IFNAME"] = facts.interface
            env.setdefault("NCCL_SOCKET_IFNAME", facts.interface)
        argv = probe.allreduce_command(
            python,
            backend=backend,
            master_addr=head_facts.address,
            master_port=port,
            rank=facts.rank,
            world_size=world,
            size_bytes=opts.size_bytes,
            iterations=opts.iterations,
            warmup=opts.warmup,
            timeout=opts.timeout,
        )
        result = transports[node.name].run(argv, env=env, timeout=opts.timeout + 30)
        return probe.parse_allreduce(result, facts.rank)

    with ThreadPoolExecutor(max_workers=world) as pool:
        ranks = list(pool.map(run_rank, ordered))
    facts_list = [f for _, f in ordered]
    link = _link_gbps(recipe, facts_list)
    min_fraction = (
        opts.min_fraction if opts.min_fraction is not None else DEFAULT_MIN_FRACTION[backend]
    )
    failed = [r for r in ranks if not r.ok]
    seconds = max((r.seconds_per_iteration or 0.0) for r in ranks) if not failed else None
    size = next((r.size_bytes for r in ranks if r.size_bytes), opts.size_bytes)
    alg = bus = fraction = None
    if seconds:
        alg, bus = probe.bus_bandwidth_gbps(size, seconds, world)
        fraction = bus / link if link else None
    correct = None if failed else all(bool(r.correct) for r in ranks)
    report = AllReduceReport(
        backend=backend,
        world_size=world,
        master=f"{head_facts.address}:{port}",
        size_bytes=size,
        iterations=opts.iterations,
        seconds_per_iteration=seconds,
        algbw_gbps=alg,
        busbw_gbps=bus,
        link_gbps=link,
        fraction_of_link=fraction,
        min_fraction=min_fraction,
        min_busbw_gbps=opts.min_busbw_gbps,
        correct=correct,
        ranks=tuple(ranks),
    )
    data = report.model_dump(exclude={"ranks"})
    if failed:
        errors = "; ".join(f"rank {r.rank}: {r.error}" for r in failed)
        if any(
            k in (r.error or "").lower()
            for r in failed
            for k in ("connect", "timed out", "distnetworkerror", "address already in use")
        ):
            errors += (
                f" (rendezvous at {report.master}: the port must be free on {ordered[0][0].name}"
                " and reachable from every node, firewall included, and each node must reach"
                " its own fabric address; --port picks another port)"
            )
        return Gate(gate="allreduce", status="fail", message=errors, data=data), report
    if not correct:
        return (
            Gate(
                gate="allreduce", status="fail", message="all-reduce returned wrong sums", data=data
            ),
            report,
        )
    assert bus is not None
    shown = f"{backend} all-reduce of {size / MIB:g} MiB x{world}: busbw {bus:.2f} Gbit/s"
    problems: list[str] = []
    if opts.min_busbw_gbps is not None and bus < opts.min_busbw_gbps:
        problems.append(f"below the required {opts.min_busbw_gbps:g} Gbit/s")
    if link and fraction is not None:
        shown += f" = {fraction:.0%} of the {link:g} Gbit/s link"
        if fraction < min_fraction:
            problems.append(f"below the {min_fraction:.0%} pass threshold")
    elif opts.min_busbw_gbps is None:
        shown += " (link rate unknown: not gated on bandwidth)"
    if problems:
        return Gate(
            gate="allreduce", status="fail", message=f"{shown}, {'; '.join(problems)}", data=data
        ), report
    return Gate(gate="allreduce", status="pass", message=shown, data=data), report


def _ib_write_bw(
    ordered: list[tuple[Node, NodeFacts]], transports: Mapping[str, Transport], opts: CheckOptions
) -> tuple[list[Gate], list[IbWriteBwReport]]:
    gates: list[Gate] = []
    reports: list[IbWriteBwReport] = []
    head_node, head = ordered[0]
    for node, facts in ordered[1:]:
        assert head.rdma is not None and facts.rdma is not None
        srv = next(p for p in facts.rdma.ports if p.ok)
        cli = next(p for p in head.rdma.ports if p.ok)
        assert srv.port is not None and cli.port is not None
        assert srv.gid_index is not None and cli.gid_index is not None
        server_argv = probe.ib_write_bw_command(srv.device, srv.port, srv.gid_index)
        client_argv = probe.ib_write_bw_command(
            cli.device, cli.port, cli.gid_index, server=facts.address
        )
        with ThreadPoolExecutor(max_workers=1) as pool:
            server = pool.submit(transports[node.name].run, server_argv, timeout=60)
            time.sleep(2.0)  # let the server listen
            client = transports[head_node.name].run(client_argv, timeout=60)
            server_result: Result = server.result()
        bw = probe.parse_ib_write_bw(client.stdout) or probe.parse_ib_write_bw(server_result.stdout)
        link = (
            min(r for r in (srv.rate_gbps, cli.rate_gbps) if r)
            if (srv.rate_gbps or cli.rate_gbps)
            else None
        )
        fraction = bw / link if bw is not None and link else None
        reports.append(
            IbWriteBwReport(
                server=node.name,
                client=head_node.name,
                device=cli.device,
                port=cli.port,
                bw_gbps=bw,
                link_gbps=link,
                fraction_of_link=fraction,
            )
        )
        if bw is None:
            tail = (client.stderr or client.stdout).strip().splitlines()[-1:] or ["no output"]
            gates.append(
                Gate(
                    gate="ib_write_bw",
                    status="fail",
                    node=head_node.name,
                    peer=node.name,
                    message=f"ib_write_bw produced no result: {tail[0]}",
                )
            )
            continue
        status: Status = "warn" if fraction is not None and fraction < 0.75 else "pass"
        gates.append(
            Gate(
                gate="ib_write_bw",
                status=status,
                node=head_node.name,
                peer=node.name,
                message=f"{bw:.1f} Gbit/s"
                + (f" = {fraction:.0%} of {link:g} Gbit/s" if fraction is not None and link else "")
                + (" (below 75%: check the cable, PCIe link and MTU)" if status == "warn" else ""),
                data={"bw_gbps": bw, "link_gbps": link},
            )
        )
    return gates, reports


# --------------------------------------------------------------------------- entry


def check_fabric(
    recipe: Recipe,
    transports: Mapping[str, Transport],
    options: CheckOptions | None = None,
    progress: Progress | None = None,
) -> CheckReport:
    """Run every gate across the recipe's nodes (head = rank 0, then the workers)."""
    opts = options or CheckOptions()
    say = progress or (lambda _msg: None)
    started = time.monotonic()
    nodes = [recipe.head, *recipe.workers]
    say(
        "reading interfaces"
        + (" and RDMA devices" if recipe.cluster.fabric.transport == "roce" else "")
    )
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        facts = list(
            pool.map(
                lambda item: _gather(recipe, item[1], item[0], transports[item[1].name], opts),
                enumerate(nodes),
            )
        )
    ordered = list(zip(nodes, facts, strict=True))
    gates: list[Gate] = []
    for f in facts:
        gates += _node_gates(f)
    gates.append(_mtu_gate(recipe, facts))
    say("don't-fragment pings at full MTU")
    gates += _ping_gates(facts, transports, opts)

    allreduce: AllReduceReport | None = None
    backend = _backend(recipe, opts)
    blocked = [g for g in gates if g.status == "fail" and g.gate in ("link", "address")]
    if backend == "nccl":
        blocked += [g for g in gates if g.status == "fail" and g.gate == "rdma"]
    if not opts.bandwidth:
        gates.append(Gate(gate="allreduce", status="skip", message="skipped (--no-bandwidth)"))
    elif len(nodes) < 2:
        gates.append(Gate(gate="allreduce", status="skip", message="one node: nothing to measure"))
    elif blocked:
        gates.append(
            Gate(
                gate="allreduce",
                status="skip",
                message="skipped: "
                + "; ".join(sorted({f"{g.gate} failed on {g.node}" for g in blocked})),
            )
        )
    else:
        say(f"{backend} all-reduce across {len(nodes)} nodes")
        gate, allreduce = _allreduce(recipe, ordered, transports, opts)
        gates.append(gate)

    ib_reports: list[IbWriteBwReport] = []
    if recipe.cluster.fabric.transport == "roce" and opts.ib_write_bw and len(nodes) > 1:
        if not all(f.rdma is not None and f.rdma.ok for f in facts):
            gates.append(
                Gate(gate="ib_write_bw", status="skip", message="skipped: RDMA gate failed")
            )
        elif not all(f.perftest for f in facts):
            missing = ", ".join(f.name for f in facts if not f.perftest)
            gates.append(
                Gate(
                    gate="ib_write_bw",
                    status="skip",
                    message=f"perftest (ib_write_bw) not installed on {missing}",
                )
            )
        else:
            say("ib_write_bw")
            ib_gates, ib_reports = _ib_write_bw(ordered, transports, opts)
            gates += ib_gates
    return CheckReport(
        recipe=recipe.name,
        transport=recipe.cluster.fabric.transport,
        ok=not any(g.status == "fail" for g in gates),
        nodes=tuple(facts),
        gates=tuple(gates),
        allreduce=allreduce,
        ib_write_bw=tuple(ib_reports),
        seconds=round(time.monotonic() - started, 2),
    )
