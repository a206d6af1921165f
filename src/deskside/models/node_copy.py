"""The node side of `deskside model sync`: what a node holds (`state`), the receiver on a
worker (`receive`) and the sender on the head (`send`).

Standard library only, run with the node's Python as `python -c` (the program is this
module after `deskside.models.node_files` and `deskside.models.node_disk`, see
`deskside.models.sync.node_program`); the
JSON input arrives on stdin (the one-shot token too: never in argv), one JSON object leaves
on stdout.

The copy is plain TCP over the fabric: the receiver listens on the worker's fabric address
on a port the kernel picks and writes it to a progress file; the sender opens several
connections to it. Each connection first presents the token (compared in constant time;
one wrong token closes it), then asks per file `FILE <blob>`; the receiver answers the
offset it already holds (a partial file of an interrupted sync continues there) and takes
the rest (`sendfile` on the head: no copy through user space) into
`blobs/.<blob>.deskside-partial`: each buffer is hashed as it arrives and written by the
stream's writer thread (`Landing`, O_DIRECT where the file system takes it) while the next
one arrives. When the sha256 of the whole file is the manifest's (`OK`), the file is
fdatasynced (beside the next file's transfer) and renamed to `blobs/<blob>`; else deleted
(`BAD`, sent again once). Then the snapshot's links are made as the hub makes them
(`snapshots/<rev>/<path>` -> `../../blobs/<blob>`), each by rename, and the head's refs
that name the revision.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import queue
import re
import socket
import sys
import threading
import time
from typing import Any

from deskside.models.node_disk import Landing, go_direct
from deskside.models.node_files import (
    CHUNK,
    folder_manifest,
    free_bytes,
    read_record,
    record_path,
    recorded,
    refs_to,
    safe_path,
    scan,
    write_record,
    write_refs,
)

# a blob's file name in the cache: never "." or "..", never a hidden file
BLOB = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")
PARTIAL = ".{}.deskside-partial"
IDLE_SECONDS = 120.0
AUTH_SECONDS = 10.0  # the token line must arrive whole within this, however it trickles
MAX_CONNECTIONS = 64  # open at once; past it the oldest one without the token is closed
END_SECONDS = 5.0  # for every stream to finish once the receiver is done, all together
CONNECT_SECONDS = 30.0


def state(cfg: dict[str, Any]) -> dict[str, Any]:
    """The node's snapshot of the revision (hashes from the record where it still holds,
    else hashed now), partial files of an interrupted sync, free disk, and the refs
    (branches) that name the revision."""
    entry, revision = cfg["entry"], cfg["revision"]
    snap = os.path.join(entry, "snapshots", revision)
    out: dict[str, Any] = {"free_bytes": free_bytes(entry), "partials": {}}
    out["refs"] = refs_to(entry, revision)
    blobs = os.path.join(entry, "blobs")
    if os.path.isdir(blobs):
        for name in os.listdir(blobs):
            if name.startswith(".") and name.endswith(".deskside-partial"):
                out["partials"][name[1 : -len(".deskside-partial")]] = os.lstat(
                    os.path.join(blobs, name)
                ).st_size
    if not os.path.isdir(snap):
        out["present"] = False
        return out
    manifest, found, hashed = folder_manifest(snap, trust_record=not cfg.get("full"))
    out.update(
        present=True,
        manifest=manifest,
        hashed=hashed,
        foreign=found.foreign,
        dangling=found.dangling,
    )
    return out


def _fill(rf: Any, view: memoryview) -> int:
    got = 0
    while got < len(view):
        n = rf.readinto(view[got:])
        if not n:
            break
        got += n
    return got


class Receiver:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.entry = cfg["entry"]
        self.blobs = os.path.join(self.entry, "blobs")
        self.token = cfg["token"].encode()
        self.need = {n["blob"]: (n["size"], n["sha256"]) for n in cfg["need"]}
        self.paths = {f["blob"]: f["path"] for f in cfg["files"] if "blob" in f}
        self.done: set[str] = set()
        self.bad: list[str] = []
        self.errors: list[str] = []
        self.received = 0
        self.lock = threading.Lock()
        self.last = time.monotonic()  # when an authenticated sender last made progress
        # open connections, oldest first: True once the token came
        self.open: dict[socket.socket, bool] = {}

    def _line(self, rf: Any) -> bytes:
        line: bytes = rf.readline(512)
        return line

    def _token(self, conn: socket.socket) -> bool:
        """Whether the first line is the token, read whole within AUTH_SECONDS (bytes that
        trickle in do not extend it, nor the receiver's idle time)."""
        end = time.monotonic() + AUTH_SECONDS
        got = b""
        while b"\n" not in got and len(got) <= 512:
            left = end - time.monotonic()
            if left <= 0:
                return False
            conn.settimeout(left)
            chunk = conn.recv(1)  # one byte: nothing of the stream after it is taken
            if not chunk:
                return False
            got += chunk
        conn.settimeout(IDLE_SECONDS)
        return hmac.compare_digest(got.strip(), self.token)

    def _prefix(self, fd: int, size: int, h: Any) -> int:
        """Hash what a partial file already holds; its length is the offset to go on at."""
        offset = os.fstat(fd).st_size
        if offset > size:
            os.ftruncate(fd, 0)
            return 0
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        pos = 0
        while pos < offset:
            n = os.preadv(fd, [view[: min(CHUNK, offset - pos)]], pos)
            if n <= 0:
                break
            h.update(view[:n])
            pos += n
        return pos

    def _one(self, conn: socket.socket, rf: Any, land: Landing, blob: str) -> bool:
        size, sha = self.need[blob]
        partial = os.path.join(self.blobs, PARTIAL.format(blob))
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(partial, flags, 0o644)
        handed = False
        try:
            h = hashlib.sha256()
            pos = self._prefix(fd, size, h)
            go_direct(fd)
            conn.sendall(b"%d\n" % pos)
            try:
                while pos < size:
                    buf = land.buffer()
                    want = min(CHUNK, size - pos)
                    n = _fill(rf, memoryview(buf)[:want])
                    h.update(memoryview(buf)[:n])
                    land.write(fd, buf, n, pos)
                    pos += n
                    with self.lock:
                        self.received += n
                    self.last = time.monotonic()
                    if n < want:
                        return False  # the sender went away: the partial file stays to go on
            finally:
                land.drain()  # every write done before the file is closed or judged
            if h.hexdigest() != sha:
                os.unlink(partial)
                conn.sendall(b"BAD\n")
                with self.lock:
                    self.bad.append(blob)
                return True
            # on disk, then renamed: in a thread of its own, while this stream goes on
            threading.Thread(target=self._finish, args=(fd, partial, blob), daemon=True).start()
            handed = True
        finally:
            if not handed:
                os.close(fd)
        conn.sendall(b"OK\n")
        return True

    def _finish(self, fd: int, partial: str, blob: str) -> None:
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)
        os.replace(partial, os.path.join(self.blobs, blob))
        with self.lock:
            self.done.add(blob)

    def serve(self, conn: socket.socket) -> None:
        try:
            self._serve(conn)
        finally:
            with self.lock:
                self.open.pop(conn, None)

    def _serve(self, conn: socket.socket) -> None:
        try:
            if not self._token(conn):
                conn.close()
                return
        except OSError:
            conn.close()
            return
        with self.lock:
            if conn in self.open:
                self.open[conn] = True
        self.last = time.monotonic()
        with conn, conn.makefile("rb") as rf:
            land = Landing()
            blob = ""
            try:
                while True:
                    line = self._line(rf).split()
                    if len(line) != 2 or line[0] != b"FILE":
                        return
                    self.last = time.monotonic()
                    blob = line[1].decode(errors="replace")
                    if blob not in self.need or not BLOB.fullmatch(blob):
                        conn.sendall(b"NO\n")
                        continue
                    if not self._one(conn, rf, land, blob):
                        return
            except (ConnectionError, TimeoutError):
                return  # the sender's side says what happened
            except OSError as exc:  # the disk (full?): said in the answer
                with self.lock:
                    self.errors.append(f"{self.paths.get(blob, blob)}: {exc}")
            finally:
                land.close()

    def progress(self, path: str, port: int) -> None:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"port={port}\nreceived={self.received}\ndone={len(self.done)}\n")
        os.replace(tmp, path)

    def run(self) -> dict[str, Any]:
        os.makedirs(self.blobs, exist_ok=True)
        os.makedirs(os.path.dirname(self.cfg["progress"]), exist_ok=True)
        server = socket.create_server((self.cfg["listen"], 0), backlog=32)
        server.settimeout(0.05)
        port = server.getsockname()[1]
        threads = []
        try:
            written = 0.0
            while len(self.done) < len(self.need):
                if time.monotonic() - written > 0.5:
                    self.progress(self.cfg["progress"], port)
                    written = time.monotonic()
                if time.monotonic() - self.last > IDLE_SECONDS:
                    break
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                # no SO_RCVBUF/SO_SNDBUF: setting one caps it at net.core.rmem_max/wmem_max
                # (about 200 KiB by default) and turns the kernel's autotuning off
                with self.lock:
                    if len(self.open) >= MAX_CONNECTIONS:
                        # full: the oldest connection still without the token makes room
                        # (a flood cannot keep the sender out); none: the new one goes
                        waiting = next((c for c, ok in self.open.items() if not ok), None)
                        if waiting is not None:
                            del self.open[waiting]
                            with contextlib.suppress(OSError):
                                waiting.shutdown(socket.SHUT_RDWR)
                    full = len(self.open) >= MAX_CONNECTIONS
                    if not full:
                        self.open[conn] = False
                if full:
                    conn.close()
                    continue
                t = threading.Thread(target=self.serve, args=(conn,), daemon=True)
                t.start()
                threads.append(t)
        finally:
            server.close()
        end = time.monotonic() + END_SECONDS
        for t in threads:
            t.join(timeout=max(0.0, end - time.monotonic()))
        with self.lock:
            lingering = list(self.open)
        for conn in lingering:  # still open past the end: nothing more is taken from them
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        links = refs = 0
        if len(self.done) == len(self.need):
            links = self.link()
            refs, failed = write_refs(self.entry, self.cfg["revision"], self.cfg.get("refs", []))
            self.errors += failed
        with contextlib.suppress(OSError):
            os.unlink(self.cfg["progress"])
        return {
            "received_bytes": self.received,
            "files": len(self.done),
            "missing": sorted(set(self.need) - self.done),
            "bad": self.bad,
            "errors": self.errors[-5:],
            "links": links,
            "refs": refs,
        }

    def link(self) -> int:
        """Every file of the head's manifest as a link into blobs/, as the hub lays it out;
        then the record of the hashes just checked."""
        snap = os.path.join(self.entry, "snapshots", self.cfg["revision"])
        made = 0
        for f in self.cfg["files"]:
            path, blob = f["path"], f["blob"]
            if not safe_path(path) or not BLOB.fullmatch(blob):
                continue
            where = os.path.join(snap, *path.split("/"))
            os.makedirs(os.path.dirname(where), exist_ok=True)
            target = os.path.relpath(os.path.join(self.blobs, blob), os.path.dirname(where))
            if os.path.islink(where) and os.readlink(where) == target:
                continue
            tmp = os.path.join(os.path.dirname(where), f".{os.path.basename(where)}.deskside-link")
            if os.path.lexists(tmp):
                os.unlink(tmp)
            os.symlink(target, tmp)
            os.replace(tmp, where)
            made += 1
        rec = record_path(self.entry, self.cfg["revision"])
        old = read_record(rec)
        sha = {f["path"]: f["sha256"] for f in self.cfg["files"]}
        received = {f["path"] for f in self.cfg["files"] if f["blob"] in self.done}
        hashed = {}
        for f in scan(snap, self.entry).files:
            known = sha.get(f.path) if f.path in received else recorded(old.get(f.path), f.key)
            if known is not None:
                hashed[f.path] = (f.key, known)
        write_record(rec, hashed)
        return made


def _connect(address: str, port: int) -> socket.socket:
    deadline = time.monotonic() + CONNECT_SECONDS
    while True:
        try:
            s = socket.create_connection((address, port), timeout=10)
            s.settimeout(IDLE_SECONDS)
            return s
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def send(cfg: dict[str, Any]) -> dict[str, Any]:
    """Send the files (biggest first) over `streams` connections; each file once more when
    the receiver found its hash wrong."""
    snap = os.path.join(cfg["entry"], "snapshots", cfg["revision"])
    todo: queue.Queue[tuple[int, dict[str, Any]]] = queue.Queue()
    for item in sorted(cfg["items"], key=lambda i: -i["size"]):
        todo.put((0, item))
    sent = [0]
    failed: list[str] = []
    lock = threading.Lock()

    def stream() -> None:
        try:
            s = _connect(cfg["address"], cfg["port"])
        except OSError as exc:
            with lock:
                failed.append(f"cannot connect to {cfg['address']}:{cfg['port']}: {exc}")
            return
        with s, s.makefile("rb") as rf:
            s.sendall(cfg["token"].encode() + b"\n")
            while True:
                try:
                    tries, item = todo.get_nowait()
                except queue.Empty:
                    break
                try:
                    s.sendall(f"FILE {item['blob']}\n".encode())
                    answer = rf.readline(64).strip()
                    if not answer.isdigit():
                        raise OSError(f"refused {item['path']}: {answer.decode(errors='replace')}")
                    offset = int(answer)
                    with open(os.path.join(snap, *item["path"].split("/")), "rb") as f:
                        s.sendfile(f, offset, item["size"] - offset)
                    with lock:
                        sent[0] += item["size"] - offset
                    verdict = rf.readline(16).strip()
                    if not verdict:
                        raise OSError(f"{item['path']}: the receiver closed the connection")
                except OSError as exc:
                    todo.put((tries, item))  # another stream takes it (it goes on from there)
                    with lock:
                        failed.append(str(exc))
                    return
                if verdict != b"OK":
                    if tries == 0:
                        todo.put((1, item))
                    else:
                        with lock:
                            failed.append(f"{item['path']}: sha256 differs twice on arrival")

    threads = [threading.Thread(target=stream) for _ in range(max(1, cfg["streams"]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    left = []
    while not todo.empty():
        left.append(todo.get_nowait()[1]["path"])
    return {"sent_bytes": sent[0], "failed": failed, "unsent": left}


def main(argv: list[str]) -> int:
    cfg = json.loads(sys.stdin.read() or "{}")
    command = argv[0] if argv else ""
    if command == "state":
        out = state(cfg)
    elif command == "receive":
        out = Receiver(cfg).run()
    elif command == "send":
        out = send(cfg)
    else:
        print(f"unknown command {command!r}", file=sys.stderr)
        return 2
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
