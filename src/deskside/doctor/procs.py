"""Engine processes on a node for `deskside doctor`: every process that looks like an LLM
engine, with its process tree's memory, its run tag and what manages it.

On a unified-memory node (GB10) an engine nobody uses still holds its weights and KV cache:
in the field a forgotten earlier engine held about 7 GB of RAM and 1.1 GB of GPU memory on
each node. The scan is one round trip (`scan`): the node's process table
(`deskside.facts.procs`), /proc/meminfo, and `nvidia-smi --query-compute-apps` when there
is one. Judging is pure.

An engine is a process `deskside.facts.procs.engine_family` recognises. Its workers are its
descendants: an engine is reported once, at the topmost engine-like process of a tree, with
the resident memory of the whole tree. An engine belongs to a live deskside run when its run
tag is the one a live run recorded; every other engine is reported with the command that
stops it, never signalled by doctor itself (`--stop-pid` signals the one a person names,
through `deskside.identity.stop_named`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from deskside.doctor.findings import Finding
from deskside.errors import DesksideError
from deskside.facts.base import Fact, Gathered, gather
from deskside.facts.memory import MemInfo, meminfo
from deskside.facts.procs import PROCESSES, Process, ProcessTable
from deskside.transport.base import Transport
from deskside.units import format_bytes

MEMINFO = meminfo()
GPU_SH = r"""
smi=$(command -v nvidia-smi) || { echo none; exit 0; }
out=$(timeout 15 "$smi" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>&1)
rc=$?
if [ "$rc" = 0 ]; then echo ok; printf '%s\n' "$out"; exit 0; fi
echo "error $rc"; printf '%s' "$out" | tail -c 200
"""


@dataclass(frozen=True)
class GpuApps:
    used: dict[int, int] | None  # pid -> bytes; None: no GPU or nvidia-smi failed
    error: str | None = None


def _mib(value: str) -> int | None:
    value = value.strip()
    return int(value) * 1024 * 1024 if value.isdigit() else None  # "[N/A]" on some GPUs


def parse_gpu_apps(text: str) -> GpuApps:
    status, _, rest = text.partition("\n")
    if status == "none":
        return GpuApps(None)
    if status != "ok":
        return GpuApps(None, rest.strip()[-200:] or status)
    used: dict[int, int] = {}
    for line in rest.splitlines():
        pid, _, size = line.partition(",")
        mib = _mib(size.split(",")[0])
        if pid.strip().isdigit() and mib is not None:
            used[int(pid)] = used.get(int(pid), 0) + mib
    return GpuApps(used)


GPU_APPS: Fact[GpuApps] = Fact("gpu-apps", GPU_SH, parse_gpu_apps)


@dataclass(frozen=True)
class ProcScan:
    table: ProcessTable
    meminfo: MemInfo | None
    gpu: dict[int, int] | None = None  # pid -> bytes; None: no GPU or nvidia-smi failed
    gpu_error: str | None = None

    @property
    def procs(self) -> list[Process]:
        return list(self.table.processes.values())

    def age_seconds(self, p: Process) -> float:
        return self.table.age_seconds(p)


class ScanFailed(DesksideError):
    """The node answered, but its process table could not be read."""


SCAN_FACTS: tuple[Fact[object], ...] = (PROCESSES, MEMINFO, GPU_APPS)  # type: ignore[assignment]
"""What a scan reads: gather them with a node's other facts in its one round trip."""


def scan(t: Transport, timeout: float) -> ProcScan:
    """The node's processes, memory and GPU users, in one round trip. ScanFailed when the
    process table cannot be read (the transport's own error when the node cannot be
    reached)."""
    return scan_of(gather(t, *SCAN_FACTS, timeout=timeout))


def scan_of(got: Gathered) -> ProcScan:
    """The scan in what a round trip that read `SCAN_FACTS` gathered."""
    table = got.result(PROCESSES)
    if not isinstance(table, ProcessTable):
        raise ScanFailed(f"the process scan failed: {table.reason}")
    meminfo = got.result(MEMINFO)
    apps = got.result(GPU_APPS)
    if not isinstance(apps, GpuApps):
        apps = GpuApps(None, apps.reason)
    return ProcScan(table, meminfo if isinstance(meminfo, MemInfo) else None, apps.used, apps.error)


@dataclass(frozen=True)
class Owner:
    """What manages a process: a systemd unit, a container, or nothing known."""

    kind: str  # unit | user-unit | container | none
    name: str = ""


_CONTAINER = re.compile(r"(?:docker|libpod|cri-containerd|crio)[-/]([0-9a-f]{12,64})")


def cgroup_owner(cgroups: tuple[str, ...]) -> Owner:
    """From /proc/PID/cgroup paths: `/docker/<id>`, `.../docker-<id>.scope` (Docker under
    systemd), `libpod-<id>` (Podman) -> a container; `/system.slice/<unit>.service` -> a
    unit; `user@<uid>.service/.../<unit>.service` -> a user's unit."""
    for path in cgroups:
        if m := _CONTAINER.search(path):
            return Owner("container", m.group(1)[:12])
    for path in cgroups:
        parts = [p for p in path.split("/") if p]
        services = [p for p in parts if p.endswith(".service")]
        if services and any(p.startswith("user@") for p in parts[:-1]):
            last = services[-1]
            if not last.startswith("user@"):
                return Owner("user-unit", last)
        elif services:
            return Owner("unit", services[-1])
    return Owner("none")


@dataclass(frozen=True)
class Engine:
    """One engine: the topmost engine-like process of a tree and its whole tree."""

    root: Process
    family: str
    pids: tuple[int, ...]  # the root and every descendant
    rss_bytes: int  # summed over the tree
    gpu_bytes: int | None  # summed over the tree; None: no GPU information
    owner: Owner
    tags: tuple[str, ...] = field(default=())  # the run tags in the tree


def engines(scan: ProcScan) -> list[Engine]:
    """Every engine of the scan, each once (see the module docstring)."""
    by_pid = {p.pid: p for p in scan.procs}
    children: dict[int, list[int]] = {}
    for p in scan.procs:
        children.setdefault(p.ppid, []).append(p.pid)
    like = {p.pid: f for p in scan.procs if (f := p.family) is not None}

    def engine_ancestor(pid: int) -> bool:
        seen = set()
        p = by_pid[pid].ppid
        while p in by_pid and p not in seen:
            if p in like:
                return True
            seen.add(p)
            p = by_pid[p].ppid
        return False

    out = []
    for pid in sorted(like):
        if engine_ancestor(pid):
            continue
        tree, todo = [], [pid]
        while todo:
            q = todo.pop()
            if q in tree:
                continue
            tree.append(q)
            todo.extend(children.get(q, []))
        procs = [by_pid[q] for q in tree]
        gpu = None if scan.gpu is None else sum(scan.gpu.get(q, 0) for q in tree)
        root = by_pid[pid]
        owner = next(
            (o for o in (cgroup_owner(p.cgroup_paths) for p in procs) if o.kind != "none"),
            Owner("none"),
        )
        out.append(
            Engine(
                root=root,
                family=like[pid],
                pids=tuple(sorted(tree)),
                rss_bytes=sum(p.rss_bytes for p in procs),
                gpu_bytes=gpu,
                owner=owner,
                tags=tuple(sorted({p.run_tag for p in procs if p.run_tag})),
            )
        )
    return out


def stop_hint(engine: Engine) -> str:
    """The exact command that stops `engine` the way it is managed."""
    o = engine.owner
    if o.kind == "container":
        return f"docker stop {o.name}"
    if o.kind == "unit":
        return f"systemctl stop {o.name}"
    if o.kind == "user-unit":
        return f"systemctl --user stop {o.name} (as the user running it)"
    return f"kill -TERM {engine.root.pid}"


def engine_findings(scan: ProcScan, node: str, live_tags: frozenset[str]) -> list[Finding]:
    """A warning per engine no live deskside run owns (what it holds is reclaimable); an
    info per engine of a live run."""
    out = []
    for e in engines(scan):
        held = e.rss_bytes + (e.gpu_bytes or 0)
        gpu = "no GPU" if e.gpu_bytes is None else f"{format_bytes(e.gpu_bytes)} GPU"
        age = scan.age_seconds(e.root) / 3600
        command = e.root.command[:160]
        detail = {
            "pid": e.root.pid,
            "start_ticks": e.root.start_ticks,
            "family": e.family,
            "processes": len(e.pids),
            "rss_bytes": e.rss_bytes,
            "gpu_bytes": e.gpu_bytes,
            "owner": f"{e.owner.kind}:{e.owner.name}" if e.owner.name else e.owner.kind,
            "run_tags": list(e.tags),
            "command": command,
        }
        what = (
            f"{e.family} pid {e.root.pid} ({len(e.pids)} processes, up {age:.1f} h): "
            f"{format_bytes(e.rss_bytes)} RAM, {gpu}: {command}"
        )
        if e.tags and set(e.tags) <= live_tags:
            out.append(Finding("engine", node, what, severity="info", detail=detail))
            continue
        if e.tags:
            what += f" (deskside run tag {e.tags[0]}, a run no longer recorded as live here)"
        out.append(
            Finding(
                "foreign-engine",
                node,
                what,
                reclaimable_bytes=held,
                severity="warning",
                fix=stop_hint(e),
                detail=detail,
            )
        )
    return out
