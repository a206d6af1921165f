"""Deploy wall time at 2 and at 4 hosts: does `deskside up` of an `ssh:` recipe scale out?

The recipe shape is the e2e deploy's (tests/deploy_cases.py): the tiny DeepSeek-V3 model
folder (pushed to every host), the native runtime, process control, tensor parallelism
across all the hosts (TP=2 on 2 hosts, TP=4 on 4), no proxy, no monitoring. The hosts are
network namespaces of this machine, each with its own sshd (tests/sshd_hosts.py), reached
over real SSH.

The engine start is replaced by a tiny stand-in: the recipe's `runtime.python` is a
wrapper that runs the real Python for everything (the preflight's probe finds vLLM) except
`-m deskside.engine.cpu`, where it starts a small HTTP server instead of vLLM. The head's
stand-in logs the planned KV cache line and answers /health, /v1/models and chat
completions; a worker's stand-in just stays alive. A real vLLM start (a minute of CPU per
rank on this 2-core machine) would dominate the wall time and hide the deploy's own.
Every stage still runs as in a real `up`: preflight, render, diff, push (release files and
the model folder), start (workers first, pid and start time recorded), ready, contract.

The deploy runs in this process (`deskside.deploy.runtime.deploy`) through timing
wrappers around the hosts' SSH transports: per stage, each host's busy seconds (the sum of
its calls; the pruning of old releases after the last stage counts to `contract`). One untimed 2-host deploy warms imports and caches first; then one deploy at 2
hosts and one at 4 (each from cold SSH connections, torn down with `down` after). Needs
root (network namespaces) and openssh-server. Target: scale_ratio (t4 / t2) <= 1.25.
Last line: `scale_ratio: <float>`.
"""

from __future__ import annotations

import copy
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1]))

from tests.deploy_cases import ensure_tiny_model, ssh_recipe_data, write_recipe
from tests.sshd_hosts import SshHosts, can_run, ssh_hosts

from deskside.deploy.runtime import STAGES, deploy
from deskside.planner.inputs import plan_recipe
from deskside.recipe.load import load_recipe
from deskside.runtime.pipeline import UpOptions, UpReport
from deskside.runtime.records import load_run
from deskside.runtime.status import down
from deskside.runtime.transports import transport_for
from deskside.transport import ssh
from deskside.transport.base import Result, Transport

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
        else:
            self._send({})
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send({"choices": [{"message": {"content": "OK"}}]})
    def log_message(self, *a):
        pass
server = http.server.ThreadingHTTPServer((value("--host"), int(value("--port"))), Api)
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


def recipe_data(hosts: SshHosts, count: int, name: str, python: Path) -> dict[str, Any]:
    h = hosts.hosts
    data = ssh_recipe_data(
        addresses=(h[0].address, h[1].address),
        interfaces=(h[0].interface, h[1].interface),
        identity_file=str(hosts.identity_file),
        root=str(hosts.private_root / "deskside"),
        hf_cache=str(hosts.private_root / "hf"),
        name=name,
    )
    nodes = data["cluster"]["nodes"]
    for i in range(2, count):
        node = copy.deepcopy(nodes[1])
        node["name"] = f"node{i}"
        node["address"] = h[i].address
        node["fabric"] = {"interface": h[i].interface, "address": h[i].address}
        nodes.append(node)
    data["engine"]["tensor_parallel_size"] = count
    data["engine"]["nnodes"] = count
    data["runtime"]["python"] = str(python)
    return data


class Timed:
    """A Transport that adds each call's seconds to its host's share of the current stage."""

    def __init__(self, inner: Transport, host: str, book: Book) -> None:
        self.inner, self.host, self.book = inner, host, book

    @property
    def name(self) -> str:
        return self.inner.name

    def _timed(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.monotonic()
        try:
            return call(*args, **kwargs)
        finally:
            self.book.add(self.host, time.monotonic() - t0)

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        input: str | None = None,
    ) -> Result:
        return self._timed(self.inner.run, argv, env=env, timeout=timeout, input=input)  # type: ignore[no-any-return]

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        log_path: str,
        cwd: str | None = None,
    ) -> int:
        return self._timed(self.inner.spawn, argv, env=env, log_path=log_path, cwd=cwd)  # type: ignore[no-any-return]

    def put(self, data: bytes, path: str, mode: int = 0o644) -> None:
        self._timed(self.inner.put, data, path, mode)

    def put_file(self, local: Path, path: str, mode: int = 0o644) -> None:
        self._timed(self.inner.put_file, local, path, mode)

    def get(self, path: str) -> bytes:
        return self._timed(self.inner.get, path)  # type: ignore[no-any-return]


class Book:
    """Busy seconds per (stage, host); the stage is the last one the deploy announced."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.stage = "(before)"
        self.seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def say(self, msg: str) -> None:
        if msg in STAGES:
            self.stage = msg

    def add(self, host: str, seconds: float) -> None:
        with self.lock:
            self.seconds[self.stage][host] += seconds


def one_deploy(hosts: SshHosts, count: int, name: str, folder: Path) -> float:
    python = folder / f"{name}-engine" / "python"
    recipe_path = write_recipe(folder, recipe_data(hosts, count, name, python), f"{name}.yaml")
    recipe = load_recipe(recipe_path)
    plan = plan_recipe(recipe, recipe_path)
    stand_in(python.parent, plan.kv_cache_line)
    ssh.close_all()  # every deploy starts from cold connections
    book = Book()
    plain = {n.name: transport_for(n, str(hosts.known_hosts)) for n in recipe.cluster.nodes}
    transports: dict[str, Transport] = {n: Timed(t, n, book) for n, t in plain.items()}
    options = UpOptions(known_hosts=str(hosts.known_hosts), timeout=120, poll_interval=0.1)
    t0 = time.monotonic()
    report = deploy(recipe, recipe_path, plan, options, transports=transports, progress=book.say)
    seconds = time.monotonic() - t0
    try:
        if not report.ok:
            raise SystemExit(f"{name}: {report.failed_stage} failed: {report.error}")
        show(name, count, report, book, seconds)
    finally:
        run = load_run(recipe.name)
        if run is not None:
            left = down(run, grace=5, transports=plain)
            if left:
                print(f"{name}: down left {left}", file=sys.stderr)
    return seconds


def show(name: str, count: int, report: UpReport, book: Book, seconds: float) -> None:
    print(f"{name}: {count} hosts, up {seconds:.2f} s")
    for stage in report.stages:
        busy = book.seconds.get(stage.name, {})
        hosts = "  ".join(f"{h} {s:.2f}" for h, s in sorted(busy.items()))
        print(f"  {stage.name:<9} {stage.seconds:6.2f} s   busy per host: {hosts or '-'}")


def main() -> None:
    ok, why = can_run()
    if not ok:
        raise SystemExit(f"cannot make sshd hosts here: {why}")
    with tempfile.TemporaryDirectory(prefix="deskside-scale-") as tmp:
        base = Path(tmp)
        os.environ["DESKSIDE_HOME"] = str(base / "home")
        recipes = base / "recipes"
        ensure_tiny_model(recipes)
        with ssh_hosts(base / "hosts", "s", 4, base / "node-root") as hosts:
            if os.environ.get("DESKSIDE_BENCH_WARMUP", "1") != "0":
                warm = one_deploy(hosts, 2, "scale-warmup", recipes)
                print(f"(warm-up, not counted: {warm:.2f} s)")
            t2 = one_deploy(hosts, 2, "scale-2", recipes)
            t4 = one_deploy(hosts, 4, "scale-4", recipes)
            ssh.close_all()
    print(f"deploy_seconds_2_hosts: {t2:.2f}")
    print(f"deploy_seconds_4_hosts: {t4:.2f}")
    print(f"scale_ratio: {t4 / t2:.3f}")


if __name__ == "__main__":
    main()
