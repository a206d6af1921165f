"""`deskside fabric show|check`: a thin face over deskside.fabric."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from deskside.cli.common import JsonFlag, emit_json, fail, out, steps
from deskside.errors import DesksideError, UsageError
from deskside.terminal import shown

if TYPE_CHECKING:
    from deskside.fabric.report import CheckReport
    from deskside.fabric.show import PortView, RecipeView, SnapshotView
    from deskside.recipe.types import Recipe
    from deskside.transport.base import Transport

app = typer.Typer(
    help="The fabric between the nodes: RDMA devices, RoCEv2 GID indexes, NCCL environment, "
    "and gates (link, MTU, don't-fragment ping, all-reduce bandwidth).",
    no_args_is_help=True,
)


KnownHostsOpt = Annotated[
    str | None,
    typer.Option(help="ssh: nodes: known_hosts file (default ~/.ssh/known_hosts)."),
]
NetnsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--netns",
        help="NODE=NAMESPACE: run that node's commands in a network namespace of this "
        "machine (overrides the recipe's netns). Repeatable.",
    ),
]


def _netns_map(values: list[str] | None) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for value in values or []:
        node, sep, ns = value.partition("=")
        if not sep or not node or not ns:
            raise UsageError(
                f"--netns {value!r}: expected NODE=NAMESPACE", hint="--netns node0=ns0"
            )
        mapping[node] = ns
    return mapping


def node_transports(
    recipe: Recipe, netns: dict[str, str], known_hosts: str | None = None
) -> dict[str, Transport]:
    """A transport per node: a namespace of this machine (--netns, then the recipe's
    `netns`), this machine (no ssh), or SSH (`known_hosts`: default ~/.ssh/known_hosts)."""
    from deskside.runtime.transports import transport_for
    from deskside.transport.local import LocalTransport

    names = {n.name for n in recipe.cluster.nodes}
    unknown = sorted(set(netns) - names)
    if unknown:
        raise UsageError(
            f"--netns names unknown node(s): {', '.join(unknown)}",
            hint="nodes: " + ", ".join(sorted(names)),
        )
    transports: dict[str, Transport] = {}
    for node in recipe.cluster.nodes:
        ns = netns.get(node.name) or getattr(node, "netns", None)
        if ns:
            transports[node.name] = LocalTransport(netns=ns)
        else:
            transports[node.name] = transport_for(node, known_hosts)
    return transports


def _load(recipe: str) -> Recipe:
    from deskside.home import resolve_recipe

    return resolve_recipe(recipe, make_model=False)[0]  # the fabric needs no model


# --------------------------------------------------------------------------- show


@app.command()
def show(
    recipe: Annotated[
        str | None,
        typer.Argument(
            help="Recipe file or embedded recipe's name: show every node (through its transport)."
        ),
    ] = None,
    sysfs_root: Annotated[
        str | None,
        typer.Option(
            help="Without a recipe: read this sysfs tree (default /sys). With one: where sysfs "
            "is on the nodes."
        ),
    ] = None,
    address: Annotated[
        str | None, typer.Option(help="This node's fabric IPv4 address: choose its GID index.")
    ] = None,
    interface: Annotated[
        str | None,
        typer.Option(help="The fabric netdev GIDs must belong to (default: each device's own)."),
    ] = None,
    hca: Annotated[
        list[str] | None, typer.Option("--hca", help="Only this device (dev or dev:port).")
    ] = None,
    ip_addr: Annotated[
        Path | None,
        typer.Option(help="`ip -j addr show` output saved beside a snapshot (IPv4 addresses)."),
    ] = None,
    netns: NetnsOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """RDMA devices, ports, state, rate, MTU, netdev, address and the chosen GID index."""
    from deskside.fabric.probe import parse_ip_addr_json
    from deskside.fabric.show import show_recipe, show_snapshot
    from deskside.fabric.sysfs import DirSource
    from deskside.transport.local import LocalTransport

    try:
        if recipe is not None:
            if address or interface or hca or ip_addr:
                raise UsageError(
                    "--address, --interface, --hca and --ip-addr describe one snapshot; "
                    "with a recipe they come from the recipe",
                    hint="drop them, or drop the recipe",
                )
            loaded = _load(recipe)
            view = show_recipe(
                loaded, node_transports(loaded, _netns_map(netns)), sysfs_root or "/sys"
            )
            if as_json:
                emit_json(view.model_dump(mode="json"))
            else:
                _print_recipe_view(view)
            return
        if address is not None:
            try:
                ipaddress.IPv4Address(address)
            except ValueError:
                raise UsageError(
                    f"--address {address!r} is not an IPv4 address", hint="e.g. 192.168.100.1"
                ) from None
        root = sysfs_root or "/sys"
        if not Path(root).is_dir():
            raise UsageError(f"--sysfs-root {root}: no such directory")
        links = None
        if ip_addr is not None:
            try:
                links = parse_ip_addr_json(ip_addr.read_text())
            except OSError as exc:
                raise UsageError(f"--ip-addr {ip_addr}: {exc.strerror}") from None
        elif Path(root).resolve() == Path("/sys"):
            result = LocalTransport().run(["ip", "-j", "addr", "show"], timeout=30)
            links = parse_ip_addr_json(result.stdout) if result.ok else None
        snap = show_snapshot(DirSource(Path(root)), address, interface, hca, links)
    except DesksideError as exc:
        fail(exc, as_json)
        return
    if as_json:
        emit_json(snap.model_dump(mode="json"))
    else:
        _print_snapshot(snap)


def _port_rows(table: Table, ports: tuple[PortView, ...], with_gid: bool) -> list[str]:
    """Fill the table; return the ports' error lines to print under it."""
    notes: list[str] = []
    for p in ports:
        if p.error is not None:
            choice = f"[red]{shown(p.error.get('kind', 'error'))}[/]"
            notes.append(f"[red]{shown(p.device)}:{p.port}[/] {shown(p.error.get('message', ''))}")
            if p.error.get("hint"):
                notes.append(f"  [dim]hint:[/] {shown(p.error['hint'])}")
        elif p.gid_index is not None:
            choice = f"[green]{p.gid_index}[/] {shown(p.gid)}"
        else:
            choice = "-" if with_gid else ""
        cells = (
            p.device,
            "" if p.port is None else str(p.port),
            p.state or "?",
            f"{p.rate_gbps:g} Gb/s" if p.rate_gbps else "?",
            p.netdev or "?",
            str(p.mtu) if p.mtu else "?",
            ", ".join(p.ipv4) if p.ipv4 else ("?" if p.ipv4 is None else "-"),
        )
        table.add_row(*(shown(c, multiline=False) for c in cells), choice)
    return notes


def _ports_table(title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("device", "port", "state", "rate", "netdev", "MTU", "IPv4", "GID index"):
        table.add_column(col, overflow="fold")
    return table


def _print_notes(notes: list[str]) -> None:
    for line in notes:
        out.print(line, highlight=False)


def _print_snapshot(snap: SnapshotView) -> None:
    title = shown(snap.sysfs_root) + (f": GID for {shown(snap.address)}" if snap.address else "")
    if not snap.ports:
        out.print(f"{title}: no RDMA devices")
        return
    table = _ports_table(title)
    notes = _port_rows(table, snap.ports, snap.address is not None)
    out.print(table)
    _print_notes(notes)


def _print_recipe_view(view: RecipeView) -> None:
    out.print(f"[bold]{shown(view.recipe)}[/]: fabric transport {shown(view.transport)}")
    for n in view.nodes:
        head = shown(
            f"{n.name} ({n.role}, {n.transport}): {n.interface or '?'} {n.address}, "
            f"MTU {n.mtu or '?'}, {n.operstate or '?'}",
            multiline=False,
        )
        if n.gid_index is not None:
            head += f", NCCL_IB_GID_INDEX={n.gid_index}"
        notes: list[str] = []
        if not n.ports:
            out.print(head + ", no RDMA devices")
        else:
            table = _ports_table(head)
            notes = _port_rows(table, n.ports, view.transport == "roce")
            out.print(table)
        if n.error:
            notes = [f"[red]{shown(n.name)}:[/] {shown(n.error.get('message'))}"] + (
                [f"  [dim]hint:[/] {shown(n.error['hint'])}"] if n.error.get("hint") else []
            )
        _print_notes(notes)


# --------------------------------------------------------------------------- check


@app.command()
def check(
    recipe: Annotated[
        str, typer.Argument(help="Recipe whose nodes to check: a file, or an embedded name.")
    ],
    netns: NetnsOpt = None,
    backend: Annotated[
        str, typer.Option(help="auto (gloo on CPU engines, nccl on GPU), gloo or nccl.")
    ] = "auto",
    port: Annotated[
        int | None,
        typer.Option(
            help="Rendezvous port for the all-reduce (default: cluster.fabric.master_port)."
        ),
    ] = None,
    size: Annotated[str, typer.Option(help="All-reduce message size.")] = "64MiB",
    iterations: Annotated[int, typer.Option(min=1, help="Timed all-reduces.")] = 5,
    min_fraction: Annotated[
        float | None,
        typer.Option(
            help="Pass threshold, bus bandwidth / link rate (default gloo 0.10, nccl 0.75)."
        ),
    ] = None,
    min_busbw: Annotated[
        float | None, typer.Option(help="Also require this bus bandwidth, Gbit/s.")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds a probe may take.")] = 120.0,
    bandwidth: Annotated[
        bool, typer.Option("--bandwidth/--no-bandwidth", help="Run the all-reduce probe.")
    ] = True,
    ib_write_bw: Annotated[
        bool, typer.Option("--ib-write-bw/--no-ib-write-bw", help="Run ib_write_bw when present.")
    ] = True,
    python: Annotated[
        str | None, typer.Option(help="Python with torch on the nodes (default: this one).")
    ] = None,
    sysfs_root: Annotated[str, typer.Option(help="Where sysfs is on the nodes.")] = "/sys",
    known_hosts: KnownHostsOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Gate the fabric: links up, MTU equal, don't-fragment ping at full MTU, all-reduce
    bandwidth against the link rate, ib_write_bw. Exit 1 when a gate fails."""
    from deskside.fabric.check import check_fabric
    from deskside.fabric.report import CheckOptions
    from deskside.units import parse_bytes

    try:
        if backend not in ("auto", "gloo", "nccl"):
            raise UsageError(f"--backend must be auto, gloo or nccl, not {backend!r}")
        try:
            size_bytes = parse_bytes(size)
        except ValueError as exc:
            raise UsageError(f"--size: {exc}") from None
        if size_bytes < 4:
            raise UsageError("--size must be at least 4 bytes")
        loaded = _load(recipe)
        transports = node_transports(loaded, _netns_map(netns), known_hosts)
        options = CheckOptions(
            python=python,
            backend=backend,
            port=port,
            size_bytes=size_bytes,
            iterations=iterations,
            min_fraction=min_fraction,
            min_busbw_gbps=min_busbw,
            timeout=timeout,
            bandwidth=bandwidth,
            ib_write_bw=ib_write_bw,
            sysfs_root=sysfs_root,
        )
        if as_json:
            report = check_fabric(loaded, transports, options)
        else:
            with steps("checking the fabric", clock=False) as say:
                report = check_fabric(loaded, transports, options, progress=say)
    except DesksideError as exc:
        fail(exc, as_json)
        return
    if as_json:
        emit_json(report.model_dump(mode="json"))
    else:
        _print_check(report)
    if not report.ok:
        raise typer.Exit(1)


_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def _print_check(report: CheckReport) -> None:
    table = Table(
        title=f"{shown(report.recipe)}: fabric {report.transport}, {len(report.nodes)} node(s)",
        title_justify="left",
    )
    for col in ("gate", "node", "status", "detail"):
        table.add_column(col, overflow="fold")
    for g in report.gates:
        where = g.node or "all"
        if g.peer:
            where += f" -> {g.peer}"
        status = f"[{_STYLE[g.status]}]{g.status}[/]"
        table.add_row(g.gate, shown(where), status, shown(g.message))
    out.print(table)
    verdict = "[green]PASS[/]" if report.ok else "[bold red]FAIL[/]"
    out.print(f"{verdict} in {report.seconds:.1f} s")
