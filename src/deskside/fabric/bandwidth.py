"""The bandwidth probes of `deskside fabric check`: an all-reduce through torch.distributed
across every node (gloo on CPU nodes, NCCL on GPU nodes), gated on its bus bandwidth against
the link rate, and `ib_write_bw` per head-worker pair on RoCE. Each returns its gates and
its report; the facts they need come from `deskside.fabric.check`."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from deskside.fabric import probe
from deskside.fabric.nccl import node_fabric_env
from deskside.fabric.report import (
    DEFAULT_MIN_FRACTION,
    AllReduceReport,
    CheckOptions,
    Gate,
    IbWriteBwReport,
    NodeFacts,
    Status,
)
from deskside.recipe.types import Node, Recipe
from deskside.transport.base import Result, Transport
from deskside.units import MIB


def backend_for(recipe: Recipe, opts: CheckOptions) -> Literal["gloo", "nccl"]:
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


def allreduce_gate(
    recipe: Recipe,
    ordered: list[tuple[Node, NodeFacts]],
    transports: Mapping[str, Transport],
    opts: CheckOptions,
) -> tuple[Gate, AllReduceReport]:
    backend = backend_for(recipe, opts)
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


def ib_write_bw_gates(
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
