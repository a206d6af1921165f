"""The replica set's drain gate: one small HTTP relay per group between the LiteLLM proxy
and the group's engine, so that a group can be taken out of the rotation with no request
failing. Standard library only: deskside writes this file beside the proxy's and runs it
with the proxy's Python (`deskside.replicas.gate`).

    python gate.py CONFIG

CONFIG (JSON): {"groups": {NAME: {"port": P, "upstream": "http://HEAD:PORT",
"key_env": VAR}}, "host": H, "keys_file": F, "drain_file": D, "timeout": S}. The engines'
keys are read from F (`VAR=value` lines, the proxy's own key file).

Every request to group G's port goes to G's engine with G's key, unless D (one group name
a line, rewritten whole by deskside) names G: then it goes to the first group D does not
name, with that group's key. A request already relayed finishes where it started: a drain
never cuts one. A request must carry its group's engine key (the proxy sends it): the gate
relays with an engine's key, so it relays for nobody else; at most MAX_CONNECTIONS
connections are served at once and a stalled client is dropped after READ_SECONDS.
`GET /deskside/gate` on any port answers the requests in flight per
engine, the drained groups and the requests relayed per group (JSON; no key in it).
"""

from __future__ import annotations

import hmac
import http.client
import http.server
import json
import os
import sys
import threading
import urllib.parse
from typing import Any

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host"}
CHUNK = 64 * 1024
MAX_BODY = 64 << 20  # a request body larger than this is refused
MAX_CONNECTIONS = 256  # connections served at once; more are answered 503 and closed
READ_SECONDS = 10.0  # a client's request head and body, each read, must come within this


class Gate:
    def __init__(self, config: dict[str, Any]) -> None:
        self.groups: dict[str, dict[str, Any]] = config["groups"]
        self.drain_file: str = config["drain_file"]
        self.timeout = float(config.get("timeout") or 600)
        self.keys = self._keys(config["keys_file"])
        self.lock = threading.Lock()
        self.in_flight = dict.fromkeys(self.groups, 0)
        self.relayed = dict.fromkeys(self.groups, 0)
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    @staticmethod
    def _keys(path: str) -> dict[str, str]:
        out = {}
        with open(path) as f:
            for line in f:
                name, _, value = line.strip().partition("=")
                if name:
                    out[name] = value
        return out

    def drained(self) -> set[str]:
        try:
            with open(self.drain_file) as f:
                return {line.strip() for line in f if line.strip()}
        except FileNotFoundError:
            return set()

    def target(self, group: str) -> str | None:
        """The group whose engine serves a new request sent to `group`."""
        drained = self.drained()
        if group not in drained:
            return group
        return next((g for g in self.groups if g not in drained), None)

    def state(self) -> dict[str, Any]:
        with self.lock:
            return {
                "in_flight": dict(self.in_flight),
                "relayed": dict(self.relayed),
                "drained": sorted(self.drained()),
            }


def handler(gate: Gate, group: str) -> type[http.server.BaseHTTPRequestHandler]:
    class Relay(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = READ_SECONDS  # socket timeout: a client that stalls is dropped

        def handle(self) -> None:
            if not gate.slots.acquire(blocking=False):
                self.close_connection = True
                return  # too many connections: closed unanswered
            try:
                super().handle()
            finally:
                gate.slots.release()

        def _authorized(self) -> bool:
            """The caller holds this port's group key (the proxy does): the gate adds an
            engine's key to what it relays, so it relays only for holders of one."""
            key = gate.keys.get(gate.groups[group]["key_env"])
            if not key:
                return True  # the group's engine takes no key
            given = self.headers.get("Authorization") or ""
            return hmac.compare_digest(given.encode(), f"Bearer {key}".encode())

        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = True

        def _relay(self) -> None:
            if self.path == "/deskside/gate":
                self._answer(200, gate.state())
                return
            if not self._authorized():
                self._answer(401, {"error": "the group's key is required"})
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0:
                self._answer(400, {"error": "bad Content-Length"})
                return
            if length > MAX_BODY:
                self._answer(413, {"error": "request body too large"})
                return
            body = self.rfile.read(length) if length else b""
            with gate.lock:
                to = gate.target(group)
                if to is None:
                    self._answer(503, {"error": "every replica group is drained"})
                    return
                gate.in_flight[to] += 1
                gate.relayed[to] += 1
            try:
                self._send(to, body)
            finally:
                with gate.lock:
                    gate.in_flight[to] -= 1

        def _send(self, to: str, body: bytes) -> None:
            up = urllib.parse.urlsplit(gate.groups[to]["upstream"])
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=gate.timeout)
            # the caller's own length and key, in whatever case it wrote them, are replaced:
            # two Content-Length headers make an engine's HTTP parser refuse the request
            replaced = HOP | {"content-length", "authorization"}
            headers = {k: v for k, v in self.headers.items() if k.lower() not in replaced}
            key = gate.keys.get(gate.groups[to]["key_env"])
            if key:
                headers["Authorization"] = f"Bearer {key}"
            headers["Content-Length"] = str(len(body))
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                r = conn.getresponse()
            except OSError as exc:
                conn.close()
                self._answer(502, {"error": f"group {to}: {type(exc).__name__}: {exc}"})
                return
            try:
                self.send_response(r.status, r.reason)
                for k, v in r.getheaders():
                    if k.lower() not in HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                while chunk := r.read1(CHUNK):
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except OSError:
                pass
            finally:
                conn.close()

        do_GET = _relay
        do_POST = _relay

    return Relay


def serve(config: dict[str, Any]) -> None:
    gate = Gate(config)
    servers = []
    for group, one in gate.groups.items():
        server = http.server.ThreadingHTTPServer(
            (config["host"], int(one["port"])), handler(gate, group)
        )
        server.daemon_threads = True
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    ports = ", ".join(f"{g} on {config['host']}:{one['port']}" for g, one in gate.groups.items())
    print(f"deskside gate: {ports}", flush=True)
    threading.Event().wait()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: gate.py CONFIG", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        config = json.load(f)
    os.umask(0o077)
    serve(config)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
