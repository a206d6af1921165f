"""One hostile case inside its own sandbox, run as PID 1 of fresh PID, mount and network
namespaces (`unshare --pid --fork --mount --net --mount-proc`):

- the network is loopback only, `/dev/shm` a private tmpfs;
- every mount except /proc, /sys, /dev and the case's own folder is read-only, so nothing
  outside the case's temporary folder can change;
- the case's hostile servers (`tests.hostile_http` modes, on fixed ports: the network is
  the case's own), foreign processes (what deskside must never signal or delete from:
  they hold or map files, carry a run tag or none) and background deskside servers start
  first; `{pid:NAME}`, `{start:NAME}`, `{tag:NAME}` and `{ino:PATH}` are then filled in
  the case's files and arguments (pids of this PID namespace);
- deskside (or a `@check` of `tests/hostile/checks.py`) runs under `ulimit -v`;
- afterwards: which foreign processes died, which kept paths changed, which paths the case
  expects removed remain, where the canary leaked. The result is written as JSON to the
  path given; leaving PID 1 ends every process of the case.

Usage: python sandbox.py SPEC.json (the spec is written by test_hostile.run_case).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import resource
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.hostile_http import serve_on  # noqa: E402

# "maps": libc's mmap, then the descriptor closed (Python's mmap would keep a duplicate)
KEEP_OPEN = """
import ctypes, os, sys, time
path, how = sys.argv[1], sys.argv[2]
if path:
    fd = os.open(path, os.O_RDWR)
    if how == "maps":
        libc = ctypes.CDLL(None)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        address = libc.mmap(None, os.fstat(fd).st_size, 1, 1, fd, 0)
        assert address not in (None, ctypes.c_void_p(-1).value)
        os.close(fd)
sys.stdout.write("ready\\n")
sys.stdout.flush()
while True:
    time.sleep(60)
"""


def sh(command: str) -> None:
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"setup {command!r}: {done.stderr.strip()}")


def mount_points() -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
        points.append(point)
    return points


def seal(writable: str) -> None:
    """Loopback up, a private /dev/shm, and every mount read-only but `writable`."""
    sh("ip link set lo up")
    sh("mount -t tmpfs -o size=256m,mode=1777 deskside-shm /dev/shm")
    sh(f"mount --bind '{writable}' '{writable}'")
    for point in mount_points():
        inside = point == writable or point.startswith(writable.rstrip("/") + "/")
        special = any(point == p or point.startswith(p + "/") for p in ("/proc", "/sys", "/dev"))
        if not inside and not special:
            subprocess.run(
                ["mount", "-o", "remount,bind,ro", point], capture_output=True, timeout=30
            )


def start_ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def start_foreign(spec: dict[str, Any], root: str) -> subprocess.Popen[bytes]:
    """A process deskside did not start: argv[0] and its arguments as the case says (it
    looks like an engine or a proxy), DESKSIDE_RUN when it has a tag, holding or mapping a
    file when asked."""
    env = {"PATH": os.environ["PATH"]}
    if "tag" in spec:
        env["DESKSIDE_RUN"] = spec["tag"]
    how = "maps" if "maps" in spec else "holds"
    path = spec.get("maps", spec.get("holds", "")).replace("{here}", root)
    title = spec.get("argv", ["VLLM::EngineCore"])
    proc = subprocess.Popen(
        [title[0], "-c", KEEP_OPEN, path, how, *title[1:]],
        executable=sys.executable,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    if proc.stdout.readline() != b"ready\n":
        raise RuntimeError(f"foreign process {spec['name']} did not start")
    return proc


def fill(text: str, values: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        kind, name = m.group(1), m.group(2)
        if kind == "ino":
            st = os.stat(name)
            return f"{st.st_dev}:{st.st_ino}"
        return values[f"{kind}:{name}"]

    return re.sub(r"\{(pid|start|tag|ino):([^{}]+)\}", one, text)


def snapshot(path: str) -> dict[str, str]:
    """Every entry below `path` (or `path` itself): its type, mode and content hash or
    link target."""
    out: dict[str, str] = {}

    def one(p: str) -> None:
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            out[p] = "missing"
            return
        if os.path.islink(p):
            out[p] = f"link {os.readlink(p)}"
        elif os.path.isdir(p):
            out[p] = f"dir {st.st_mode:o}"
            for name in sorted(os.listdir(p)):
                one(os.path.join(p, name))
        elif os.path.isfile(p):
            digest = hashlib.sha256(Path(p).read_bytes()).hexdigest()
            out[p] = f"file {st.st_mode:o} {st.st_ino} {digest}"
        else:
            out[p] = f"other {st.st_mode:o} {st.st_ino}"

    one(path)
    return out


def readable(path: Path) -> list[bytes]:
    """A file's bytes, and each member's if it is an archive deskside writes."""
    if not path.is_file() or path.is_symlink() or path.stat().st_size > 64 << 20:
        return []
    data = path.read_bytes()
    out = [data]
    if path.name.endswith((".tar.gz", ".tgz", ".tar")):
        with (
            contextlib.suppress(tarfile.TarError, OSError, EOFError),
            tarfile.open(fileobj=io.BytesIO(data)) as tar,
        ):
            for member in tar.getmembers():
                out.append(member.name.encode())
                f = tar.extractfile(member)
                if f is not None:
                    out.append(f.read())
    elif path.name.endswith(".gz"):
        with contextlib.suppress(OSError, EOFError):
            out.append(gzip.decompress(data))
    return out


def holders(base: Path, canary: bytes) -> set[Path]:
    return {p for p in base.rglob("*") if any(canary in b for b in readable(p))}


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    base, root = spec["base"], spec["root"]
    result: dict[str, Any] = {"returncode": None, "output": "", "seconds": 0.0}
    values: dict[str, str] = {}
    foreign: dict[str, subprocess.Popen[bytes]] = {}
    try:
        seal(base)
        for command in spec.get("setup", []):
            sh(command.replace("{here}", root))
        for server in spec.get("servers", []):
            serve_on(server["mode"], server["port"])
        for f in spec.get("foreign", []):
            proc = foreign[f["name"]] = start_foreign(f, root)
            values[f"pid:{f['name']}"] = str(proc.pid)
            values[f"start:{f['name']}"] = str(start_ticks(proc.pid))
            values[f"tag:{f['name']}"] = f.get("tag", "")
        for rel in spec.get("fill", []):
            path = Path(root) / rel
            path.write_text(fill(path.read_text(), values))
        argv = [fill(a, values) for a in spec["argv"]]
        env = spec["env"]
        for i, bg in enumerate(spec.get("background", [])):
            with open(Path(base) / f"background-{i}.log", "wb") as log:
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "deskside.cli",
                        *[fill(a.replace("{here}", root), values) for a in bg],
                    ],
                    env=env,
                    cwd=root,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
        time.sleep(spec.get("settle", 0))
        kept = {p: snapshot(fill(p.replace("{here}", root), values)) for p in spec.get("keep", [])}
        canary = spec.get("canary", "").encode()
        held = holders(Path(base), canary) if canary else set()
        memory = int(spec["memory"])

        def bounded() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

        if argv[0].startswith("@"):
            argv = [sys.executable, str(Path(__file__).with_name("checks.py")), *argv]
        else:
            argv = [sys.executable, "-m", "deskside.cli", *argv]
        t0 = time.monotonic()
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                errors="replace",
                env=env,
                cwd=root,
                input=spec.get("stdin", ""),
                timeout=spec["limit"] * 3,
                preexec_fn=bounded,
            )
            result.update(returncode=done.returncode, output=done.stdout + done.stderr)
        except subprocess.TimeoutExpired:
            pass
        result["seconds"] = time.monotonic() - t0
        result["dead"] = [name for name, p in foreign.items() if not alive(p.pid)]
        result["changed"] = [
            path
            for before in kept.values()
            for path, what in snapshot(next(iter(before))).items()
            if before.get(path) != what
        ] + [
            path
            for before in kept.values()
            for path in before
            if not os.path.lexists(path) and before[path] != "missing"
        ]
        result["remained"] = [
            p
            for p in (fill(g.replace("{here}", root), values) for g in spec.get("gone", []))
            if os.path.lexists(p)
        ]
        if canary:
            leaked = holders(Path(base), canary) - held
            if canary.decode() in result["output"]:
                leaked.add(Path("<output>"))
            result["leaked"] = sorted(str(p) for p in leaked)
    except Exception as exc:  # the sandbox itself failed: say so, never hang
        result["sandbox_error"] = f"{type(exc).__name__}: {exc}"
    Path(spec["result"]).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
