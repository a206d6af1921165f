"""The process table of a node: every process with its pid, parent, state letter, session,
start time, CPU time, resident memory, command line, run tag, control groups and the LLM
engine it runs, read in one command.

The command only prints /proc as it is, framed: every line of every file prefixed with its
path by `grep -H` (a process cannot forge another's lines, whatever its command name or
arguments hold), control groups and command lines cut at `LINES` lines of `LINE_BYTES`
bytes per file, bytes outside printable ASCII shown as `?`. Of an environment (which can
hold megabytes) it prints only whether it reads, whether it starts with a NUL byte, and its
`RUN_TAG` items (cut past `TAG_BYTES`: a longer one is no tag deskside wrote). The parsing
is pure Python here: `parse_stat` is the one reader of /proc/PID/stat (the command name may
hold spaces, `)` and newlines: the fields follow the last `)`).

The run tag: deskside puts `RUN_TAG=<recipe>/<node>/<start>/<what>` in the environment of
every process it starts; every exec and every child inherits it. A process title written
over the environment (setproctitle writes NUL bytes over its start, as vLLM's ranks do;
an environment never starts with one) hides the tag: such a process counts through its
parent in the same session (`ProcessTable.carries`); one whose environment reads normally
without the tag never does.

On a node, deskside's exporter reads its own engine's /proc files with bounded reads
(`deskside.smallfile`) through `parse_stat` and `parse_environ`; every other reader (the
guard, status, down, doctor, diagnose) runs this command through a Transport, a
LocalTransport on the node itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

from deskside.facts import RUN_TAG as RUN_TAG
from deskside.facts.base import Fact, FactError

# process titles: vLLM names its engine core and workers "VLLM::EngineCore",
# "VLLM::Worker_TP0" (vllm.utils.system_utils.set_process_title, VLLM_PROCESS_NAME_PREFIX)
TITLES: dict[str, str] = {"VLLM::": "vLLM"}
# titles of the processes that compute (an engine core, a worker rank); the API server
# keeps its command line (vllm.utils.system_utils.set_process_title callers)
COMPUTE_MARKERS = ("EngineCore", "Worker_TP", "Worker_PP", "VllmWorker", "Worker_DP")
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

LINE_BYTES = 4096  # of one printed line (its path prefix included)
LINES = 32  # of one file's lines (a stat line holds at most 16: its name's newlines)
TAG_BYTES = 512  # of a run tag's value
MAX_ARGS = 64  # arguments kept of a command line
TABLE_CAP = 32 << 20  # bytes the whole table may print
GONE_STATES = ("Z", "X")  # proc(5): zombie, dead

PRINTABLE = r"'\000\011\012\040-\176'"
# `proc_table [full]`: the table; `full` adds command lines and control groups
TABLE_SH = (
    r"""
proc_table() {
  ( export LC_ALL=C; cd /proc || exit 1
    printf 'proc-table %s %s %s\n' "$(id -u)" "$(getconf CLK_TCK 2>/dev/null || echo 100)" \
      "$(getconf PAGESIZE 2>/dev/null || echo 4096)"
    {
      grep -a -H -m 1 '' uptime
      printf '%s\n' [0-9]*/stat | xargs -r grep -a -H -m 16 ''
      printf '%s\n' [0-9]*/environ | xargs -r grep -a -z -H -c ''
      if [ "${1:-}" = full ]; then
        printf '%s\n' [0-9]*/cmdline [0-9]*/cgroup | xargs -r grep -a -H -m LINES ''
      fi
    } 2>/dev/null | cut -b 1-LINE_BYTES
    echo '== nul =='
    printf '%s\n' [0-9]*/environ | xargs -r grep -a -z -H -n -m 1 -o '^.' 2>/dev/null
    printf '%s\n' [0-9]*/environ | xargs -r grep -a -z -H -m 4 '^RUN_TAG=' 2>/dev/null \
      | cut -z -b 1-TAG_CUT
    printf '== end ==\000'
  ) | LC_ALL=C tr -c PRINTABLE '?'
}
""".replace("RUN_TAG", RUN_TAG)
    .replace("LINE_BYTES", str(LINE_BYTES))
    .replace("LINES", str(LINES))
    .replace("TAG_CUT", str(TAG_BYTES + 64))
    .replace("PRINTABLE", PRINTABLE)
)


def computes(title: str | None) -> bool:
    """A process whose title says it is an engine core or a worker rank."""
    return bool(title) and any(m in (title or "") for m in COMPUTE_MARKERS)


def _is_python(program: str) -> bool:
    return re.fullmatch(r"python[0-9.]*", program) is not None


def engine_family(argv: Sequence[str]) -> str | None:
    """Which engine `argv` runs: a program of `PROGRAMS` (or the script a Python runs), a
    `python -m` module of `MODULES`, or a title starting with one of `TITLES`; else None."""
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
class Stat:
    """The fields of /proc/PID/stat deskside reads (proc(5) field numbers in comments)."""

    pid: int  # 1
    comm: str  # 2, without its parentheses
    state: str  # 3: R S D T t Z X I
    ppid: int  # 4
    session: int  # 6
    cpu_ticks: int  # 14 utime + 15 stime, clock ticks
    threads: int  # 20
    start_ticks: int  # 22: clock ticks after boot
    rss_pages: int  # 24


def parse_stat(text: str) -> Stat | None:
    """The fields of one /proc/PID/stat; None when it is not one (cut short, junk). The
    command name may hold spaces, parentheses and newlines: the fields follow the last
    `)`, the pid precedes the first ` (`."""
    head, sep, _ = text.partition(" (")
    comm, close, tail = text[len(head) + 2 :].rpartition(")")
    rest = tail.split()
    if not sep or not close or len(rest) < 22 or not head.strip().isdigit():
        return None
    numbers = (rest[1], rest[3], rest[11], rest[12], rest[17], rest[19], rest[21])
    if not all(n.isdigit() for n in numbers) or len(rest[0]) != 1:
        return None
    return Stat(
        pid=int(head),
        comm=comm,
        state=rest[0],
        ppid=int(rest[1]),
        session=int(rest[3]),
        cpu_ticks=int(rest[11]) + int(rest[12]),
        threads=int(rest[17]),
        start_ticks=int(rest[19]),
        rss_pages=int(rest[21]),
    )


def parse_environ(data: bytes) -> dict[str, str]:
    """An environment block (/proc/PID/environ: NUL-separated `KEY=value` items)."""
    env: dict[str, str] = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


EnvironState = Literal["read", "hidden", "unreadable"]


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    state: str  # the /proc/PID/stat state letter
    session: int
    start_ticks: int
    cpu_ticks: int  # utime + stime
    rss_bytes: int
    threads: int
    comm: str
    argv: tuple[str, ...] = ()  # empty: not read, a kernel thread or a zombie
    run_tags: tuple[str, ...] = ()  # every RUN_TAG item of its environment
    environ: EnvironState = "unreadable"  # hidden: empty, or starts with a NUL byte
    cgroups: tuple[str, ...] = ()  # the lines of /proc/PID/cgroup: `hierarchy:controllers:path`

    @property
    def command(self) -> str:
        return " ".join(self.argv)

    @property
    def run_tag(self) -> str | None:
        return self.run_tags[0] if self.run_tags else None

    @property
    def gone(self) -> bool:
        return self.state in GONE_STATES

    @property
    def family(self) -> str | None:
        return engine_family(self.argv)

    @property
    def cgroup_paths(self) -> tuple[str, ...]:
        return tuple(sorted({c.split(":", 2)[2] for c in self.cgroups}))


@dataclass(frozen=True)
class ProcessTable:
    processes: dict[int, Process] = field(default_factory=dict)
    clk_tck: int = 100
    page_size: int = 4096
    uptime: float | None = None  # seconds since boot
    uid: int | None = None  # of the reader (another user's environments do not read)
    junk: int = 0  # lines of the listing that did not parse (skipped)

    def get(self, pid: int | None) -> Process | None:
        return None if pid is None else self.processes.get(pid)

    def age_seconds(self, p: Process) -> float:
        up = self.uptime or 0.0
        return max(up - p.start_ticks / max(self.clk_tck, 1), 0.0)

    def session(self, sid: int) -> list[Process]:
        """The live processes (not zombies) of session `sid`, by pid."""
        return sorted(
            (p for p in self.processes.values() if p.session == sid and not p.gone),
            key=lambda p: p.pid,
        )

    def carries(self, pid: int, tag: str, sid: int) -> bool:
        """Process `pid` carries run tag `tag`: in its environment, or, when a title hid its
        environment, through its parent while it is in session `sid` (16 steps at most)."""
        q = pid
        for _ in range(16):
            p = self.processes.get(q)
            if p is None:
                return False
            if tag in p.run_tags:
                return True
            if p.environ != "hidden" or p.session != sid:
                return False
            q = p.ppid
        return False

    def members(self, sid: int, tag: str) -> list[int]:
        """The live processes of session `sid` that carry `tag`."""
        return [p.pid for p in self.session(sid) if self.carries(p.pid, tag, sid)]

    def descendants(self, roots: Iterable[int]) -> list[int]:
        """`roots` (those listed) and every process below them, by pid."""
        children: dict[int, list[int]] = {}
        for p in self.processes.values():
            children.setdefault(p.ppid, []).append(p.pid)
        found: set[int] = set()
        todo = [r for r in roots if r in self.processes]
        while todo:
            q = todo.pop()
            if q not in found:
                found.add(q)
                todo.extend(children.get(q, []))
        return sorted(found)


def _argv(lines: list[str]) -> tuple[str, ...]:
    args = "\n".join(lines).rstrip("\0").split("\0") if lines else []
    return tuple(a for a in args[:MAX_ARGS]) if any(args) else ()


def _int(text: str, default: int) -> int:
    text = text.strip()
    return int(text) if text.isdigit() and len(text) < 19 else default


def _head(line: str) -> tuple[int | None, int, int]:
    words = line.split()
    if len(words) != 4 or words[0] != "proc-table":
        raise FactError("not a process table")
    uid = int(words[1]) if words[1].isdigit() else None
    return uid, _int(words[2], 100) or 100, _int(words[3], 4096) or 4096


def split_table(text: str) -> tuple[ProcessTable, str]:
    """The table `proc_table` printed at the start of `text`, and what follows it."""
    first, _, body = text.partition("\n")
    uid, clk, page = _head(first)
    # every line grep prints starts with its file's path: a line `== nul ==` is the table's
    body = "\n" + body
    at = body.find("\n== nul ==\n")
    if at < 0:
        raise FactError("the process table was cut short")
    lines_part, nul_part = body[:at], body[at + len("\n== nul ==\n") :]
    files: dict[tuple[int, str], list[str]] = {}
    uptime: float | None = None
    junk = 0
    for line in lines_part.split("\n"):
        path, colon, content = line.partition(":")
        if not colon:
            junk += 1 if line else 0
            continue
        if path == "uptime":
            word = content.split(" ", 1)[0]
            uptime = float(word) if re.fullmatch(r"[0-9]+(\.[0-9]+)?", word) else None
            continue
        number, slash, kind = path.partition("/")
        if slash and number.isdigit() and kind in ("stat", "environ", "cmdline", "cgroup"):
            files.setdefault((int(number), kind), []).append(content)
        else:
            junk += 1
    # every record grep prints ends with a NUL and starts with its file's path
    nul_part = "\0" + nul_part
    end = nul_part.find("\0== end ==\0")
    if end < 0:
        raise FactError("the process table was cut short")
    records, rest = nul_part[1:end].split("\0"), nul_part[end + len("\0== end ==\0") :]
    first_item: dict[int, str] = {}
    tags: dict[int, list[str]] = {}
    for record in records:
        path, _, content = record.partition(":")
        owner = path.removesuffix("/environ")
        if not owner.isdigit() or owner == path:
            continue
        number, colon, _ = content.partition(":")
        if colon and number.isdigit():
            first_item[int(owner)] = number
        elif content.startswith(RUN_TAG + "="):
            value = content[len(RUN_TAG) + 1 :]
            if len(value) <= TAG_BYTES:
                tags.setdefault(int(owner), []).append(value)
    procs: dict[int, Process] = {}
    for (pid, kind), lines in files.items():
        if kind != "stat":
            continue
        st = parse_stat("\n".join(lines))
        if st is None or st.pid != pid:
            junk += len(lines)
            continue
        readable = (pid, "environ") in files
        environ: EnvironState = (
            "unreadable" if not readable else "read" if first_item.get(pid) == "1" else "hidden"
        )
        cgroups = [ln for ln in files.get((pid, "cgroup"), []) if ln.count(":") >= 2]
        procs[pid] = Process(
            pid=pid,
            ppid=st.ppid,
            state=st.state,
            session=st.session,
            start_ticks=st.start_ticks,
            cpu_ticks=st.cpu_ticks,
            rss_bytes=st.rss_pages * page,
            threads=st.threads,
            comm=st.comm,
            argv=_argv(files.get((pid, "cmdline"), [])),
            run_tags=tuple(tags.get(pid, ())),
            environ=environ,
            cgroups=tuple(sorted(set(cgroups))),
        )
    table = ProcessTable(dict(sorted(procs.items())), clk, page, uptime, uid, junk)
    return table, rest


def parse_table(text: str) -> ProcessTable:
    return split_table(text)[0]


PROCESSES: Fact[ProcessTable] = Fact(
    "processes", TABLE_SH + "proc_table full", parse_table, cap=TABLE_CAP
)
"""Every process with its command line and control groups."""
PROCESS_IDS: Fact[ProcessTable] = Fact(
    "process-ids", TABLE_SH + "proc_table", parse_table, cap=TABLE_CAP
)
"""Every process, without command lines or control groups: enough to prove identities."""
