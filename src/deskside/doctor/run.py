"""`deskside doctor RECIPE`: what holds each node's memory, disk and ports before the
recipe starts, and what can be reclaimed safely.

Per machine (the nodes on this machine share one): engines nobody's live run owns
(`deskside.doctor.procs`), containers and units of other stacks (`deskside.doctor.stacks`),
orphaned shared memory (`deskside.doctor.shm`), MemAvailable against what the plan needs.
Per node: deskside's records that outlived their engines (`deskside.doctor.runs`), free
disk where the release and the weights go, and the head's ports where the engine binds
(its network namespace, when it has one). Extra checks (`extra_checks`) add their own
findings.

`fix` acts only on fixable findings: orphaned segments (checked again right before the
removal) and dead records (checked again as a whole first). Everything else is reported
with the command a user can run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deskside.deploy.preflight import MARGIN_BYTES, head_ports
from deskside.doctor import procs, shm, space, stacks
from deskside.doctor.findings import DoctorReport, Finding
from deskside.doctor.runs import OwnRuns, node_layout, other_live_tags, own_runs
from deskside.errors import DesksideError, UsageError
from deskside.facts.base import Fact, Gathered, Unread, command_fact, gather
from deskside.facts.disk import DiskSpace, disk_space, held_bytes
from deskside.facts.model_folder import hf_cache_entry
from deskside.facts.network import listening, port_holders
from deskside.facts.shm import shm as shm_scan
from deskside.identity import stop_named
from deskside.layout import NodeLayout, local_model_folder
from deskside.localnet import existing_namespaces
from deskside.recipe.types import Node, Recipe
from deskside.runtime.transports import HERE
from deskside.transport.base import Transport
from deskside.transport.local import LocalTransport

if TYPE_CHECKING:
    from deskside.planner.plan import Plan

ExtraCheck = Callable[[Recipe, Path, Mapping[str, Transport]], list[Finding]]
SCAN_TIMEOUT = 60.0
READ_TIMEOUT = 120.0  # one round trip reading every fact of a machine or a node


@dataclass(frozen=True)
class Host:
    """One machine and the recipe's nodes on it (all nodes without ssh: this machine)."""

    label: str
    nodes: tuple[Node, ...]
    transport: Transport  # its root namespace


def hosts(recipe: Recipe, transports: Mapping[str, Transport], here: Transport) -> list[Host]:
    local = tuple(n for n in recipe.cluster.nodes if n.ssh is None)
    out = [Host("+".join(n.name for n in local), local, here)] if local else []
    out += [
        Host(n.name, (n,), transports[n.name]) for n in recipe.cluster.nodes if n.ssh is not None
    ]
    return out


def node_need(
    plan: Plan | None, recipe: Recipe, recipe_path: Path, node: Node
) -> tuple[int, int] | None:
    """(the memory the plan takes on `node`, the floor it keeps free there): on unified
    memory vLLM's budget; on CPU the ranks' weights, KV cache and other memory. None when
    no plan could be made or the engine's memory is not the node's RAM."""
    from deskside.exporter.memory import floor_bytes

    if plan is None:
        return None
    if plan.memory is not None:
        if not plan.memory.unified:
            return None
        return plan.memory.vllm_budget_bytes, plan.memory.safety_floor_bytes
    ranks = [r for r in plan.ranks if r.node in (node.name, None)]
    used = sum(r.weights_bytes + r.available_kv_bytes + r.non_kv_bytes for r in ranks)
    return used, floor_bytes(recipe, recipe_path, node)


def host_need(needs: list[tuple[int, int] | None]) -> int | None:
    """What the nodes of one machine need together: each engine's memory, and the floor
    once (the machine keeps it free for all of them)."""
    if not needs or any(n is None for n in needs):
        return None
    return sum(n[0] for n in needs if n) + max(n[1] for n in needs if n)


@dataclass
class Doctor:
    recipe: Recipe
    recipe_path: Path
    transports: Mapping[str, Transport]  # per node: where its engine binds (its netns)
    known_hosts: str | None = None
    shm_dir: str = "/dev/shm"
    here: Transport = field(default_factory=LocalTransport)
    extra_checks: Sequence[ExtraCheck] = ()

    def state_transports(self) -> dict[str, Transport]:
        """Where each node's state and processes are read: this machine's root namespace
        for nodes on it (a namespace shares its files and processes), else the node's."""
        return {
            n.name: self.here if n.ssh is None else self.transports[n.name]
            for n in self.recipe.cluster.nodes
        }

    def places(self) -> dict[str, Transport]:
        """Every `node` a finding may name -> the transport its action runs through."""
        where: dict[str, Transport] = {HERE: self.here, **self.state_transports()}
        for h in hosts(self.recipe, self.transports, self.here):
            where[h.label] = h.transport
        return where

    # -- checks

    def run(self) -> DoctorReport:
        recipe = self.recipe
        report = DoctorReport(recipe.name)
        plan = self._plan(report)
        own = own_runs(recipe, self.state_transports())
        report.findings += own.findings
        for host in hosts(recipe, self.transports, self.here):
            try:
                self._host(host, own, plan, report)
            except DesksideError as exc:
                report.unreachable.append(host.label)
                report.findings.append(
                    Finding("unreachable", host.label, exc.message, severity="problem")
                )
        for node in recipe.cluster.nodes:
            if node.name in report.unreachable:
                continue
            try:
                report.findings += self._node(node, own, plan)
            except DesksideError as exc:
                report.findings.append(
                    Finding("unreachable", node.name, exc.message, severity="problem")
                )
        for check in self.extra_checks:
            try:
                report.findings += check(recipe, self.recipe_path, self.state_transports())
            except DesksideError as exc:
                report.findings.append(Finding("check", HERE, exc.message, severity="warning"))
        return report

    def _plan(self, report: DoctorReport) -> Plan | None:
        from deskside.planner.inputs import plan_recipe

        try:
            return plan_recipe(self.recipe, self.recipe_path)
        except DesksideError as exc:
            report.findings.append(
                Finding(
                    "no-plan",
                    HERE,
                    f"no plan, so no memory or port figures: {exc.message}",
                    severity="info",
                    fix=exc.hint,
                )
            )
            return None

    def _host(self, host: Host, own: OwnRuns, plan: Plan | None, report: DoctorReport) -> None:
        t, label = host.transport, host.label
        found: list[Finding] = []
        shm_fact = shm_scan(self.shm_dir)
        stacks_fact = command_fact("stack_scan", stacks.scan_command(), stacks.parse_scan)
        got = gather(t, *procs.SCAN_FACTS, shm_fact, stacks_fact, timeout=READ_TIMEOUT)
        scan: procs.ProcScan | None = None
        try:
            scan = procs.scan_of(got)
        except procs.ScanFailed as exc:
            found.append(
                Finding(
                    "process-scan",
                    label,
                    exc.message,
                    severity="warning",
                    fix="the scan reads /proc with sh, grep, xargs, cut and tr: check them there",
                )
            )
        if scan is None:
            engines: list[procs.Engine] = []
        else:
            engines = procs.engines(scan)
            tags = {tag for e in engines for tag in e.tags}
            live = own.live_tags | other_live_tags(
                tags - own.live_tags, self.recipe.name, self.known_hosts
            )
            found += procs.engine_findings(scan, label, frozenset(live))
        segments = got.result(shm_fact)
        if not isinstance(segments, Unread):
            found += shm.shm_findings(*shm.segments_of(segments), label, self.shm_dir)
        stack = got.result(stacks_fact)
        if not isinstance(stack, Unread):
            covered = {e.owner.name for e in engines if e.owner.kind == "container"}
            units = {e.owner.name for e in engines if e.owner.kind == "unit"}
            found += stacks.stack_findings(stack, label, self.recipe.name, covered, units)
        report.findings += found
        info = scan.meminfo if scan is not None else None
        if info is None:
            return
        needs = [node_need(plan, self.recipe, self.recipe_path, n) for n in host.nodes]
        reclaimable = sum(f.reclaimable_bytes for f in found)
        memory = {
            "total_bytes": info.total_bytes,
            "available_bytes": info.available_bytes,
            "reclaimable_bytes": reclaimable,
        }
        need = host_need(needs)
        if need is not None:
            memory["need_bytes"] = need
        report.memory[label] = memory
        running = [n.name for n in host.nodes if own.alive.get(n.name)]
        if "need_bytes" in memory and not running:
            short = space.memory_finding(
                label, info.total_bytes, info.available_bytes, memory["need_bytes"], reclaimable
            )
            if short is not None:
                report.findings.append(short)

    def _node(self, node: Node, own: OwnRuns, plan: Plan | None) -> list[Finding]:
        """Ports (the head) and disk (deployed nodes) of one node, in one round trip."""
        recipe = self.recipe
        deployed = node.ssh is not None
        if not deployed and (node.role != "head" or own.alive.get(node.name)):
            return []
        t = self.transports[node.name]
        netns = getattr(node, "netns", None)
        if netns and not deployed and netns not in existing_namespaces(self.here):
            return [
                Finding(
                    "ports",
                    node.name,
                    f"network namespace {netns} does not exist yet: its ports are free",
                    severity="info",
                )
            ]
        layout = NodeLayout.of(recipe) if deployed else node_layout(recipe, None, node)
        check_ports = node.role == "head" and not own.alive.get(node.name)
        ports = head_ports(recipe, self._engine_ports(plan)) if check_ports else {}
        listen_fact, holders_fact = listening(), port_holders(sorted(ports))
        wanted: list[Fact[Any]] = [listen_fact, holders_fact] if check_ports else []
        weights = deployed and recipe.model.repo is not None and plan is not None
        cache = recipe.runtime.hf_cache
        space_fact = disk_space(layout.recipe_dir, *([cache] if weights else []))
        held_fact = held_bytes(hf_cache_entry(cache, recipe.model.repo or ""))
        wanted += [space_fact] if deployed else []
        wanted += [held_fact] if weights else []
        got = gather(t, *wanted, timeout=READ_TIMEOUT)
        out = [
            Finding("facts", node.name, f"could not read {u.fact} ({u.reason})", severity="warning")
            for u in got.unread
        ]
        listening_now = got.result(listen_fact)
        if check_ports and not isinstance(listening_now, Unread):
            holders = got.result(holders_fact)
            where = f"in namespace {netns}" if netns else f"on {node.name}"
            out += space.port_findings(
                node.name,
                listening_now,
                ports,
                {} if isinstance(holders, Unread) else holders,
                where,
            )
        if deployed:
            out += self._disk(node, layout, got, space_fact, held_fact if weights else None, plan)
        return out

    def _engine_ports(self, plan: Plan | None) -> list[int]:
        from deskside.engine.launch import Site, launch_of, launches

        recipe = self.recipe
        if plan is None:
            many = len(recipe.cluster.nodes) > 1
            return [recipe.engine.port, *([recipe.cluster.fabric.master_port] if many else [])]
        site = Site.deployed(recipe, self.recipe_path)
        return list(launch_of(launches(recipe, plan, site), recipe.head.name).ports)

    def _disk(
        self,
        node: Node,
        layout: NodeLayout,
        got: Gathered,
        space_fact: Fact[dict[str, DiskSpace]],
        held_fact: Fact[int] | None,
        plan: Plan | None,
    ) -> list[Finding]:
        recipe = self.recipe
        spaces = got.result(space_fact)
        if isinstance(spaces, Unread):
            return []
        out = []
        folder = local_model_folder(recipe, self.recipe_path)
        upload = _folder_bytes(folder) if folder is not None else 0
        f = space.disk_finding(
            node.name,
            layout.recipe_dir,
            spaces[layout.recipe_dir].free_bytes,
            upload + MARGIN_BYTES,
            "the release and the model",
        )
        out += [f] if f else []
        if held_fact is not None and plan is not None:
            total = int(plan.model.get("weights_bytes_total") or 0)
            cache = recipe.runtime.hf_cache
            held = got.result(held_fact)
            need = max(total - (0 if isinstance(held, Unread) else held), 0) + MARGIN_BYTES
            f = space.disk_finding(node.name, cache, spaces[cache].free_bytes, need, "the weights")
            out += [f] if f else []
        return out

    # -- acting

    def fix(
        self, report: DoctorReport, progress: Callable[[Finding, bool, str], None] | None = None
    ) -> DoctorReport:
        """Run the action of every fixable finding not fixed yet, each through the
        transport of its node; dead records only while a fresh look still finds them dead."""
        places = self.places()
        still_dead: set[str] | None = None
        findings = []
        for f in report.findings:
            if not f.fixable or f.fixed or not f.action:
                findings.append(f)
                continue
            if f.kind == "dead-run":
                if still_dead is None:
                    fresh = own_runs(self.recipe, self.state_transports()).findings
                    still_dead = {str(g.detail.get("path")) for g in fresh if g.kind == "dead-run"}
                if str(f.detail.get("path")) not in still_dead:
                    findings.append(_failed(f, "it runs again", progress))
                    continue
            r = places[f.node].run(list(f.action), timeout=SCAN_TIMEOUT)
            if r.ok:
                findings.append(f.done())
                if progress:
                    progress(f, True, "")
            else:
                findings.append(_failed(f, (r.stderr or r.stdout).strip()[-200:], progress))
        report.findings = findings
        return report

    def stop_pids(
        self,
        report: DoctorReport,
        pids: Iterable[int],
        progress: Callable[[Finding, bool, str], None] | None = None,
    ) -> DoctorReport:
        """SIGTERM engines the user named by pid: only ones this scan reported as foreign
        engines, and only while the pid still has the start time the scan saw."""
        places = self.places()
        by_pid = {
            int(f.detail["pid"]): i
            for i, f in enumerate(report.findings)
            if f.kind == "foreign-engine" and "pid" in f.detail
        }
        for pid in pids:
            if pid not in by_pid:
                raise UsageError(
                    f"--stop-pid {pid}: not an engine this check found",
                    hint="name a pid from the foreign-engine lines of `deskside doctor`",
                )
        for pid in pids:
            i = by_pid[pid]
            f = report.findings[i]
            argv = stop_named(pid, int(f.detail["start_ticks"]))
            r = places[f.node].run(argv, timeout=SCAN_TIMEOUT)
            if r.ok:
                report.findings[i] = f.done()
                if progress:
                    progress(f, True, "")
            else:
                report.findings[i] = _failed(f, r.stderr.strip()[-200:], progress)
        return report


def _failed(f: Finding, why: str, progress: Callable[[Finding, bool, str], None] | None) -> Finding:
    if progress:
        progress(f, False, why)
    return replace(f, detail={**f.detail, "fix_error": why})


def _folder_bytes(folder: Path) -> int:
    if not folder.is_dir():
        return 0
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
