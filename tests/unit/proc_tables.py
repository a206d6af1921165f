"""Process tables as the node prints them (`deskside.facts.procs.TABLE_SH`), written from a
description of each process: for fake nodes and for parser tests. The text follows what
`grep -H` prints for each /proc file (checked against a real table in
tests/unit/test_facts_procs.py)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from deskside.facts.procs import RUN_TAG, TAG_BYTES


@dataclass(frozen=True)
class P:
    pid: int
    ppid: int = 1
    start: int = 1000
    comm: str = "sleep"
    state: str = "S"
    session: int | None = None  # None: the process leads its own session
    utime: int = 0
    stime: int = 0
    threads: int = 1
    rss_pages: int = 0
    argv: tuple[str, ...] = ()
    environ: bytes | None = b"PATH=/bin\0"  # None: unreadable
    cgroups: tuple[str, ...] = ()

    @property
    def sid(self) -> int:
        return self.pid if self.session is None else self.session

    def stat(self) -> str:
        """A /proc/PID/stat line: 52 fields, the ones deskside reads in place."""
        fields = [self.state, str(self.ppid), str(self.sid), str(self.sid), "0", "-1", "4194560"]
        fields += ["0"] * 4 + [str(self.utime), str(self.stime), "0", "0", "20", "0"]
        fields += [str(self.threads), "0", str(self.start), "1000000", str(self.rss_pages)]
        fields += ["0"] * (50 - len(fields))
        return f"{self.pid} ({self.comm}) " + " ".join(fields) + "\n"


def tagged(pid: int, tag: str, **kw: object) -> P:
    return P(pid, environ=f"PATH=/bin\0{RUN_TAG}={tag}\0".encode(), **kw)  # type: ignore[arg-type]


def _lines(path: str, text: str, limit: int) -> list[str]:
    if not text:
        return []
    body = text[:-1] if text.endswith("\n") else text
    return [f"{path}:{line}\n" for line in body.split("\n")[:limit]]


def _environ(p: P) -> tuple[list[str], list[str]]:
    """(the count line, the NUL records) grep prints of one environment."""
    if p.environ is None:
        return [], []
    data = p.environ
    items = data.split(b"\0")
    if data.endswith(b"\0"):
        items = items[:-1]
    count = [f"{p.pid}/environ:{len(items)}\n"]
    records = []
    first = next((i for i, item in enumerate(items, 1) if item), None)
    if first is not None:
        records.append(f"{p.pid}/environ:{first}:{items[first - 1][:1].decode()}\0")
    prefix = f"{RUN_TAG}=".encode()
    tags = [item for item in items if item.startswith(prefix)][:4]
    for item in tags:  # each record cut at TAG_BYTES + 64 bytes
        records.append(f"{p.pid}/environ:{item.decode()}"[: TAG_BYTES + 64] + "\0")
    return count, records


def table_text(
    procs: Iterable[P], *, uid: int = 0, clk_tck: int = 100, page: int = 4096, uptime: float = 5e3
) -> str:
    """What `proc_table full` prints for these processes."""
    procs = list(procs)
    lines = [f"uptime:{uptime:.2f} 1.00\n"]
    counts: list[str] = []
    nul: list[str] = []
    for p in procs:
        lines += _lines(f"{p.pid}/stat", p.stat(), 16)
        count, records = _environ(p)
        counts += count
        nul += records
    lines += counts
    for p in procs:
        cmdline = "".join(a + "\0" for a in p.argv)
        lines += _lines(f"{p.pid}/cmdline", cmdline, 32)
    for p in procs:
        lines += _lines(f"{p.pid}/cgroup", "".join(c + "\n" for c in p.cgroups), 32)
    return (
        f"proc-table {uid} {clk_tck} {page}\n"
        + "".join(lines)
        + "== nul ==\n"
        + "".join(nul)
        + "== end ==\0"
    )
