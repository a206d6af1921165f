"""The replica set's drain gate relays with an engine's key, so it relays only for callers
that hold the key of the group whose port they call (the set's proxy does); a client that
stalls is dropped. A real gate process in front of a real HTTP server on loopback."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from deskside.replicas import gate_server

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Upstream(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str | None]] = []
    lengths: ClassVar[list[list[str]]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Upstream.seen.append(self.headers.get("Authorization"))
        Upstream.lengths.append(self.headers.get_all("Content-Length") or [])
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[str]:
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    keys = tmp_path / "keys.env"
    keys.write_text("KEY_A=engine-secret-a\n")
    port = free_port()
    config = {
        "host": "127.0.0.1",
        "keys_file": str(keys),
        "drain_file": str(tmp_path / "drained"),
        "timeout": 30,
        "groups": {
            "a": {
                "port": port,
                "upstream": f"http://127.0.0.1:{upstream.server_address[1]}",
                "key_env": "KEY_A",
            }
        },
    }
    (tmp_path / "gate.json").write_text(json.dumps(config))
    proc = subprocess.Popen(
        [sys.executable, gate_server.__file__, str(tmp_path / "gate.json")],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert b"deskside gate" in proc.stdout.readline()
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()
        upstream.shutdown()


def test_only_a_holder_of_the_groups_key_is_relayed(gate: str) -> None:
    Upstream.seen.clear()
    with httpx.Client(timeout=10) as client:
        anonymous = client.post(f"{gate}/v1/completions", json={})
        wrong = client.post(
            f"{gate}/v1/completions", json={}, headers={"Authorization": "Bearer guess"}
        )
        holder = client.post(
            f"{gate}/v1/completions",
            json={},
            headers={"Authorization": "Bearer engine-secret-a"},
        )
    assert (anonymous.status_code, wrong.status_code) == (401, 401)
    assert "engine-secret" not in anonymous.text + wrong.text
    assert holder.status_code == 200 and holder.json() == {"ok": True}
    assert Upstream.seen == ["Bearer engine-secret-a"]  # the refused ones never reached it


def test_the_callers_length_and_key_are_replaced_in_any_case(gate: str) -> None:
    """A real engine's HTTP parser refuses a request with two Content-Length headers: the
    caller's, written in lower case, is replaced, not doubled."""
    Upstream.lengths.clear()
    host, port = gate.removeprefix("http://").split(":")
    body = b'{"prompt": "x"}'
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: "
            + str(len(body)).encode()
            + b"\r\nauthorization: Bearer engine-secret-a\r\n\r\n"
            + body
        )
        assert s.recv(1024).startswith(b"HTTP/1.1 200")
    assert Upstream.lengths == [[str(len(body))]]


def test_a_stalled_client_is_dropped(gate: str) -> None:
    host, port = gate.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        s.settimeout(gate_server.READ_SECONDS + 15)
        t0 = time.monotonic()
        assert s.recv(1024) == b""  # closed by the gate
        assert time.monotonic() - t0 < gate_server.READ_SECONDS + 10
