"""Engine processes on a node for `deskside doctor`: every process that looks like an LLM
engine, with its process tree's memory, its run tag and what manages it.

On a unified-memory node (GB10) an engine nobody uses still holds its weights and KV cache:
in the field a forgotten earlier engine held about 7 GB of RAM and 1.1 GB of GPU memory on
each node. The scan (`scan_command`) runs one Python script on the node (python3 reads
/proc; `nvidia-smi --query-compute-apps` when there is one). Parsing and judging are pure.

An engine is a process whose command line names one of `PROGRAMS` (the program, or the
script a Python runs), `MODULES` (`python -m MODULE`) or starts with one of `TITLES` (the
process titles vLLM gives its engine core and workers). Its workers are its descendants:
an engine is reported once, at the topmost engine-like process of a tree, with the resident
memory of the whole tree. An engine belongs to a live deskside run when its `DESKSIDE_RUN`
tag is the one a live run recorded; every other engine is reported with the command that
stops it, never signalled by doctor itself.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from deskside.doctor.findings import Finding
from deskside.facts.memory import MemInfo, parse_meminfo
from deskside.units import format_bytes

# program (argv[0], or the script after a Python) -> the engine's family
PROGRAMS: dict[str, str] = {
    "vllm": "vLLM",
    "sglang": "SGLang",
    "llama-server": "llama.cpp",
    "ollama": "Ollama",
    "trtllm-serve": "TensorRT-LLM",
    "text-generation-launcher": "TGI",
    "text-generation-router": "TGI",
    "tritonserver": "Triton",
    "lmdeploy": "LMDeploy",
}
# `python -m MODULE[.sub]` -> family
MODULES: dict[str, str] = {
    "vllm": "vLLM",
    "sglang": "SGLang",
    "deskside.engine": "deskside engine",
    "tensorrt_llm": "TensorRT-LLM",
    "lmdeploy": "LMDeploy",
    "llama_cpp": "llama.cpp",
}
# process titles: vLLM names its engine core and workers "VLLM::EngineCore", "VLLM::Worker_TP0"
# (vllm.utils.system_utils.set_process_title, prefix VLLM_PROCESS_NAME_PREFIX)
TITLES: dict[str, str] = {"VLLM::": "vLLM"}

SCAN_PY = r"""
import json, os, shutil, subprocess
def small(path, limit=1 << 20):
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None
head = {"clk_tck": os.sysconf("SC_CLK_TCK"), "gpu": None}
up = small("/proc/uptime")
head["uptime"] = float(up.split()[0]) if up else 0.0
head["meminfo"] = (small("/proc/meminfo") or b"").decode(errors="replace")
smi = shutil.which("nvidia-smi")
if smi:
    try:
        r = subprocess.run([smi, "--query-compute-apps=pid,used_memory",
                            "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=15)
        if r.returncode == 0:
            head["gpu"] = [l.split(",")[:2] for l in r.stdout.splitlines() if "," in l]
        else:
            head["gpu_error"] = (r.stderr or r.stdout).strip()[-200:]
    except (OSError, subprocess.SubprocessError) as e:
        head["gpu_error"] = str(e)[-200:]
print(json.dumps(head))
for name in os.listdir("/proc"):
    if not name.isdigit():
        continue
    base = "/proc/" + name + "/"
    cmd = small(base + "cmdline", 8192)
    st = small(base + "stat", 4096)
    if not cmd or not st:
        continue
    rest = st.decode(errors="replace").rpartition(")")[2].split()
    if len(rest) < 20 or rest[0] in ("Z", "X"):
        continue
    rss = 0
    for line in (small(base + "status", 65536) or b"").decode(errors="replace").splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    tag = None
    env = small(base + "environ", 4 << 20) or b""
    for item in env.split(b"\0"):
        if item.startswith(b"DESKSIDE_RUN="):
            tag = item[13:].decode(errors="replace")
    cg = sorted({l.split(":", 2)[2] for l in
                 (small(base + "cgroup", 65536) or b"").decode(errors="replace").splitlines()
                 if l.count(":") >= 2})
    argv = [a.decode(errors="replace")[:300] for a in cmd.rstrip(b"\0").split(b"\0")[:12]]
    print(json.dumps({"p": [int(name), int(rest[1]), int(rest[19]), rss, tag, argv, cg]}))
"""


def scan_command(python: str = "python3") -> list[str]:
    return [python, "-c", SCAN_PY]


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    start_ticks: int
    rss_bytes: int
    tag: str | None
    argv: tuple[str, ...]
    cgroups: tuple[str, ...] = ()

    @property
    def command(self) -> str:
        return " ".join(self.argv)


@dataclass(frozen=True)
class ProcScan:
    procs: list[Proc]
    meminfo: MemInfo | None
    uptime: float = 0.0
    clk_tck: int = 100
    gpu: dict[int, int] | None = None  # pid -> bytes; None: no GPU or nvidia-smi failed
    gpu_error: str | None = None

    def age_seconds(self, p: Proc) -> float:
        return max(self.uptime - p.start_ticks / max(self.clk_tck, 1), 0.0)


def _mib(value: str) -> int | None:
    value = value.strip()
    return int(value) * 1024 * 1024 if value.isdigit() else None  # "[N/A]" on some GPUs


def parse_scan(text: str) -> ProcScan:
    procs: list[Proc] = []
    head: dict[str, object] = {}
    for line in text.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if not isinstance(item, dict):
            continue
        if "p" in item:
            pid, ppid, start, rss, tag, argv, cg = item["p"]
            procs.append(
                Proc(int(pid), int(ppid), int(start), int(rss) * 1024, tag, tuple(argv), tuple(cg))
            )
        else:
            head = item
    gpu: dict[int, int] | None = None
    raw_gpu = head.get("gpu")
    if isinstance(raw_gpu, list):
        gpu = {}
        for pid, used in raw_gpu:
            size = _mib(str(used))
            if str(pid).strip().isdigit() and size is not None:
                gpu[int(pid)] = gpu.get(int(pid), 0) + size
    meminfo = head.get("meminfo")
    uptime = head.get("uptime", 0.0)
    clk = head.get("clk_tck", 100)
    error = head.get("gpu_error")
    return ProcScan(
        procs=procs,
        meminfo=parse_meminfo(meminfo) if isinstance(meminfo, str) else None,
        uptime=float(uptime) if isinstance(uptime, (int, float)) else 0.0,
        clk_tck=int(clk) if isinstance(clk, int) else 100,
        gpu=gpu,
        gpu_error=str(error) if error else None,
    )


def _is_python(program: str) -> bool:
    return re.fullmatch(r"python[0-9.]*", program) is not None


def engine_family(argv: tuple[str, ...]) -> str | None:
    """Which engine `argv` runs (see the module docstring), or None."""
    if len(argv) == 1 and " " in argv[0]:
        argv = tuple(argv[0].split())  # a process title set over the whole command line
    if not argv:
        return None
    for title, family in TITLES.items():
        if argv[0].startswith(title):
            return family
    program = PurePosixPath(argv[0].split(" ")[0]).name
    if program in PROGRAMS:
        return PROGRAMS[program]
    if not _is_python(program):
        return None
    args = list(argv[1:])
    while args and args[0].startswith("-") and args[0] != "-m":
        args.pop(0)  # interpreter options (-u, -O, -X dev is rare enough to miss)
    if len(args) >= 2 and args[0] == "-m":
        module = args[1]
        for name, family in MODULES.items():
            if module == name or module.startswith(name + "."):
                return family
        return None
    if args and PurePosixPath(args[0]).name in PROGRAMS:
        return PROGRAMS[PurePosixPath(args[0]).name]
    return None


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

    root: Proc
    family: str
    pids: tuple[int, ...]  # the root and every descendant
    rss_bytes: int  # summed over the tree
    gpu_bytes: int | None  # summed over the tree; None: no GPU information
    owner: Owner
    tags: tuple[str, ...] = field(default=())  # DESKSIDE_RUN tags in the tree


def engines(scan: ProcScan) -> list[Engine]:
    """Every engine of the scan, each once (see the module docstring)."""
    by_pid = {p.pid: p for p in scan.procs}
    children: dict[int, list[int]] = {}
    for p in scan.procs:
        children.setdefault(p.ppid, []).append(p.pid)
    like = {p.pid: f for p in scan.procs if (f := engine_family(p.argv)) is not None}

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
            (o for o in (cgroup_owner(p.cgroups) for p in procs) if o.kind != "none"),
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
                tags=tuple(sorted({p.tag for p in procs if p.tag})),
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


# Signal a process the user named, only while it is still the same process (start time,
# field 22 of /proc/PID/stat) and never pid 0 or 1.
STOP_PID_SH = r"""
pid=$1; start=$2
case $pid in ''|*[!0-9]*|0|1) echo "refusing to act on pid '$pid'" >&2; exit 2 ;; esac
read -r st < "/proc/$pid/stat" 2>/dev/null || { echo "pid $pid is gone" >&2; exit 3; }
rest=${st##*) }
set -- $rest
if [ "${20}" != "$start" ]; then echo "pid $pid is another process now" >&2; exit 3; fi
kill -TERM "$pid"
"""


def stop_pid_command(pid: int, start_ticks: int) -> list[str]:
    return ["sh", "-c", STOP_PID_SH, "sh", str(pid), str(start_ticks)]


def live_tag_owner(tag: str) -> tuple[str, str] | None:
    """(recipe, node) of a deskside run tag (`recipe/node/<14 digits>/what`)."""
    parts = tag.split("/")
    if len(parts) != 4 or not (parts[2].isdigit() and len(parts[2]) == 14):
        return None
    return parts[0], parts[1]


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
