"""Checks a hostile case runs in place of a deskside command (`args = ["@NAME", ...]`),
inside the case's sandbox: floods against the servers deskside runs, then one honest
request that must still be answered. Each prints what it saw and exits 0 when the server
answered the honest request, 1 when it did not.

  @flood URL N MODE        N connections to URL's host and port (MODE idle: connect and
                           say nothing; drip: a request head one byte every 0.2 s; junk:
                           a garbage line), then GET URL within 10 s
  @receiver-flood DIR N    the model-sync receiver (a process of its own, its token on
                           stdin) under N idle connections and token-less dripping lines,
                           then one file sent with the token; DIR is the case's folder
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "src"))


def wait_port(host: str, port: int, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def flood(host: str, port: int, n: int, mode: str) -> tuple[list[socket.socket], threading.Event]:
    held: list[socket.socket] = []
    stop = threading.Event()
    for _ in range(n):  # past the listen backlog some are refused: that is part of it
        with contextlib.suppress(OSError):
            s = socket.create_connection((host, port), timeout=2)
            if mode == "junk":
                s.sendall(b"\x00\xff not http \r\n")
            held.append(s)
    if mode == "drip":

        def drip() -> None:
            head = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X: " + b"a" * 100_000
            for i in range(len(head)):
                if stop.is_set():
                    return
                for s in held:
                    with contextlib.suppress(OSError):
                        s.send(head[i : i + 1])
                time.sleep(0.2)

        threading.Thread(target=drip, daemon=True).start()
    return held, stop


def get(url: str, seconds: float = 10.0) -> tuple[int, bytes]:
    """One GET with a deadline over the whole exchange (plain sockets: no client library
    between the check and the server)."""
    parts = urlsplit(url)
    deadline = time.monotonic() + seconds
    with socket.create_connection((parts.hostname, parts.port), timeout=seconds) as s:
        s.sendall(f"GET {parts.path} HTTP/1.0\r\nHost: {parts.hostname}\r\n\r\n".encode())
        data = b""
        while time.monotonic() < deadline:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
            if len(data) > 16 << 20:
                break
        else:
            raise TimeoutError(f"no whole answer within {seconds:.0f} s")
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
    return status, body


def check_flood(url: str, n: str, mode: str) -> int:
    parts = urlsplit(url)
    assert parts.hostname and parts.port
    wait_port(parts.hostname, parts.port)
    held, stop = flood(parts.hostname, parts.port, int(n), mode)
    print(f"{len(held)} {mode} connections open")
    t0 = time.monotonic()
    try:
        status, body = get(url)
    except OSError as exc:
        print(f"no answer: {type(exc).__name__}: {exc}")
        return 1
    finally:
        stop.set()
    print(f"HTTP {status} in {time.monotonic() - t0:.1f} s")
    print(body[:4000].decode(errors="replace"))
    return 0 if status == 200 else 1


def check_receiver_flood(folder: str, n: str) -> int:
    revision = "0" * 40
    data = os.urandom(100_000)
    digest = hashlib.sha256(data).hexdigest()
    head = Path(folder) / "head" / "models--org--m"
    (head / "snapshots" / revision).mkdir(parents=True)
    (head / "snapshots" / revision / "model.safetensors").write_bytes(data)
    worker = Path(folder) / "worker" / "models--org--m"
    item = {"blob": digest, "size": len(data), "sha256": digest, "path": "model.safetensors"}
    progress = worker / ".deskside" / "sync.progress"
    cfg = {
        "entry": str(worker),
        "revision": revision,
        "token": "the-token",
        "listen": "127.0.0.1",
        "need": [item],
        "files": [item],
        "refs": [],
        "progress": str(progress),
    }
    receiver = subprocess.Popen(
        [sys.executable, "-m", "deskside.models.node_copy", "receive"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )
    assert receiver.stdin is not None
    receiver.stdin.write(json.dumps(cfg))
    receiver.stdin.close()
    deadline = time.monotonic() + 15
    while not progress.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    port = int(progress.read_text().split("\n")[0].split("=")[1])
    held, stop = flood("127.0.0.1", port, int(n), "idle")
    token_less, stop2 = flood("127.0.0.1", port, 20, "drip")
    print(f"{len(held)} idle and {len(token_less)} token-less connections open")
    from deskside.models import node_copy

    sent = node_copy.send(
        {
            "entry": str(head),
            "revision": revision,
            "token": "the-token",
            "address": "127.0.0.1",
            "port": port,
            "streams": 2,
            "items": [item],
        }
    )
    stop.set()
    stop2.set()
    for s in held + token_less:
        s.close()
    try:
        receiver.wait(timeout=30)
    except subprocess.TimeoutExpired:
        receiver.kill()
        print("the receiver did not end")
        return 1
    assert receiver.stdout is not None
    out = receiver.stdout.read()
    print("sent:", json.dumps(sent))
    print("received:", out.strip())
    landed = worker / "snapshots" / revision / "model.safetensors"
    ok = landed.exists() and landed.read_bytes() == data and not sent["failed"]
    print("the file landed whole" if ok else "the file did not land")
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    name, *args = argv
    if name == "@flood":
        return check_flood(*args)
    if name == "@receiver-flood":
        return check_receiver_flood(*args)
    print(f"unknown check {name}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
