"""A stand-in for vLLM where a test's claim is about orchestration (deploy, rollback,
status, logs, down over SSH; replica sets), not about vLLM: a real vLLM start costs a
minute of CPU per rank on a 2-core machine.

The recipe's `runtime.python` becomes a wrapper that runs the real Python for everything
(the preflight's probe finds vLLM) except `-m deskside.engine.cpu`, where it starts a small
HTTP server instead of vLLM. What the stand-in keeps of vLLM's outside, because deskside
relies on it:

- the head logs the planned KV cache line as vLLM's EngineCore does, and answers /health,
  /v1/models (the served names), /metrics (its finished requests) and chat and text
  completions in OpenAI's shape;
- like vLLM (vllm/entrypoints/openai/api_server.py, AuthenticationMiddleware), with
  VLLM_API_KEY in its environment every /v1 path needs `Authorization: Bearer <key>` and
  is refused with 401 otherwise; /health and /metrics stay open;
- the head forks a helper that stays in its session until it is signalled or the head is
  gone (vLLM's engine core): stopping the engine means stopping the whole session;
- a worker (`--headless`) logs a few start-up lines and stays alive;
- with STAND_IN_DELAY (seconds) in its environment (the recipe's engine.env) it takes
  that long to answer each completion, so requests are in flight long enough to drain;
- in a multi-node run the ranks are linked as vLLM's are by torch.distributed: the head
  listens on `--master-port`, each worker connects to `--master-addr` (waiting for the
  head as vLLM's rendezvous does), and a rank that loses the link exits with a failure,
  as vLLM's ranks do at their next collective with a lost peer (that real vLLM does is
  checked on the shared e2e cluster).

`real_when`: a word that, found among the engine's arguments, makes the wrapper start the
real vLLM instead (a release meant to fail in vLLM's own words, next to stand-in releases).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

STAND_IN = r"""
import http.server, json, os, signal, socket, sys, threading, time
args = sys.argv[1:]
def value(flag, default=""):
    return args[args.index(flag) + 1] if flag in args else default
MASTER = (value("--master-addr"), int(value("--master-port", "0")))
def lost_peer(conn):
    conn.recv(1)  # returns when the other rank's process is gone
    print("stand-in: lost the link to a peer rank", flush=True)
    os._exit(1)
names = []
if "--served-model-name" in args:
    for a in args[args.index("--served-model-name") + 1:]:
        if a.startswith("--"):
            break
        names.append(a)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
if "--headless" in args:
    print("stand-in worker: rank " + value("--node-rank") + " starting", flush=True)
    while True:
        try:
            link = socket.create_connection(MASTER, timeout=2)
            break
        except OSError:
            time.sleep(0.2)
    link.settimeout(None)
    print("stand-in worker: linked to the head", flush=True)
    print("stand-in worker up", flush=True)
    lost_peer(link)
head = os.getpid()
if os.fork() == 0:  # the engine core: in the session until signalled or the head is gone
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    while os.getppid() == head:
        time.sleep(0.5)
    os._exit(0)
if MASTER[1]:
    listener = socket.create_server(MASTER, reuse_port=False)
    def accept():
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=lost_peer, args=(conn,), daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()
KEY = os.environ.get("VLLM_API_KEY")
DELAY = float(os.environ.get("STAND_IN_DELAY") or 0)
class Api(http.server.BaseHTTPRequestHandler):
    def _send(self, body, status=200):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def _refused(self):
        if KEY and self.path.startswith("/v1") and (
            self.headers.get("Authorization") != "Bearer " + KEY
        ):
            self._send({"error": "Unauthorized"}, 401)
            return True
        return False
    def do_GET(self):
        if self._refused():
            return
        if self.path == "/v1/models":
            self._send({"data": [{"id": n, "object": "model"} for n in names]})
        elif self.path == "/metrics":
            n = self.server.answered
            text = f"vllm:request_success_total{{finished_reason=\"stop\"}} {n}\n"
            data = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._send({})
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self._refused():
            return
        time.sleep(DELAY)
        self.server.answered += 1
        tokens = int(body.get("max_tokens") or 1)
        if self.path.endswith("/completions") and "chat" not in self.path:
            choice = {"index": 0, "text": "OK " * tokens, "finish_reason": "length"}
            kind = "text_completion"
        else:
            choice = {"index": 0, "message": {"role": "assistant", "content": "OK"},
                      "finish_reason": "stop"}
            kind = "chat.completion"
        self._send({
            "id": "cmpl-stand-in", "object": kind, "created": int(time.time()),
            "model": body.get("model", ""), "choices": [choice],
            "usage": {"prompt_tokens": 1, "completion_tokens": tokens,
                      "total_tokens": 1 + tokens},
        })
    def log_message(self, *a):
        pass
server = http.server.ThreadingHTTPServer((value("--host"), int(value("--port"))), Api)
server.answered = 0
print("(EngineCore pid=1) INFO [kv_cache_utils.py:1] " + KV_LINE, flush=True)
print("INFO: Application startup complete.", flush=True)
server.serve_forever()
"""


def stand_in(
    folder: Path, kv_line: str, real_when: str | None = None, seen_at: str | None = None
) -> Path:
    """The wrapper the recipe names as its Python (see the module docstring), written to
    `folder`; `seen_at`: where the engine's host sees that folder (a booted test host's
    disk), when not at the same path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stand_in_engine.py").write_text(f"KV_LINE = {kv_line!r}\n" + STAND_IN)
    server = Path(seen_at or folder) / "stand_in_engine.py"
    real = ""
    if real_when is not None:
        assert re.fullmatch(r"--[a-z0-9-]+", real_when), real_when  # one plain flag
        real = f'  case " $* " in *" {real_when} "*) exec {sys.executable} "$@";; esac\n'
    wrapper = folder / "python"
    wrapper.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = -m ] && [ "$2" = deskside.engine.cpu ]; then\n'
        f"{real}"
        f'  shift 3; exec {sys.executable} {server} "$@"\n'
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper
