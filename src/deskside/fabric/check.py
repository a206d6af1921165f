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

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from deskside.engine.launch import node_ip
from deskside.fabric import probe
from deskside.fabric.bandwidth import allreduce_gate, backend_for, ib_write_bw_gates
from deskside.fabric.gid import NodeResolution, resolve_node
from deskside.fabric.report import (
    AllReduceReport,
    CheckOptions,
    CheckReport,
    Gate,
    IbWriteBwReport,
    NodeFacts,
    Progress,
    Status,
)
from deskside.fabric.sysfs import read_snapshot
from deskside.fabric.sysfs_dump import dump_command, parse_dump
from deskside.facts.network import Link
from deskside.recipe.types import Node, Recipe
from deskside.transport.base import Transport

# --------------------------------------------------------------------------- facts


def _gather(recipe: Recipe, node: Node, rank: int, t: Transport, opts: CheckOptions) -> NodeFacts:
    address = node_ip(node)
    roce = recipe.cluster.fabric.transport == "roce"
    links = probe.parse_addr(t.run(probe.addr_command(), timeout=30))
    interface = node.fabric.interface if node.fabric else None
    interface = interface or probe.interface_for_address(links, address)
    link: Link | None = links.get(interface) if interface else None
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
    backend = backend_for(recipe, opts)
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
        gate, allreduce = allreduce_gate(recipe, ordered, transports, opts)
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
            ib_gates, ib_reports = ib_write_bw_gates(ordered, transports, opts)
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
