"""A stand-in for vLLM in deploy tests and benchmarks over SSH hosts: the recipe's
`runtime.python` becomes a wrapper that runs the real Python for everything (the
preflight's probe finds vLLM) except `-m deskside.engine.cpu`, where it starts a small HTTP
server instead of vLLM. The head's stand-in logs the planned KV cache line and answers
/health, /v1/models, /metrics (its finished requests) and chat completions (OpenAI's
shape); a worker's stand-in just stays alive. A real vLLM start costs a minute of CPU per
rank on a 2-core machine."""

from __future__ import annotations

import sys
from pathlib import Path

STAND_IN = r"""
import http.server, json, signal, sys, time
args = sys.argv[1:]
def value(flag, default=""):
    return args[args.index(flag) + 1] if flag in args else default
names = []
if "--served-model-name" in args:
    for a in args[args.index("--served-model-name") + 1:]:
        if a.startswith("--"):
            break
        names.append(a)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
if "--headless" in args:
    print("stand-in worker up", flush=True)
    while True:
        time.sleep(3600)
class Api(http.server.BaseHTTPRequestHandler):
    def _send(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        if self.path == "/v1/models":
            self._send({"data": [{"id": n} for n in names]})
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
        self.server.answered += 1
        self._send({
            "id": "chatcmpl-stand-in", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", ""),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })
    def log_message(self, *a):
        pass
server = http.server.ThreadingHTTPServer((value("--host"), int(value("--port"))), Api)
server.answered = 0
print("(EngineCore pid=1) INFO [kv_cache_utils.py:1] " + KV_LINE, flush=True)
print("INFO: Application startup complete.", flush=True)
server.serve_forever()
"""


def stand_in(folder: Path, kv_line: str) -> Path:
    """The wrapper the recipe names as its Python (see the module docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    server = folder / "stand_in_engine.py"
    server.write_text(f"KV_LINE = {kv_line!r}\n" + STAND_IN)
    wrapper = folder / "python"
    wrapper.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = -m ] && [ "$2" = deskside.engine.cpu ]; then\n'
        f'  shift 3; exec {sys.executable} {server} "$@"\n'
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper
