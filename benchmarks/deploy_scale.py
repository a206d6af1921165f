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

The hosts share this machine's two cores, so whatever a host spends per command is paid
four times over at 4 hosts, which separate machines would not. By default the hosts' login
shell skips root's ~/.bashrc (`plain_login_shell`: on this machine it runs `pyenv init`,
0.3 s a command); DESKSIDE_BENCH_SHELL=as-is keeps it.

The deploy runs in this process (`deskside.deploy.runtime.deploy`) through timing
wrappers around the hosts' SSH transports. Per stage: its wall seconds, the CPU seconds of
this process and of the hosts (sshd and what it ran), and each host's busy seconds (the
sum of its calls; the pruning of old releases after the last stage counts to `contract`).
One untimed 2-host deploy warms imports and caches first; then one deploy at 2 hosts and
one at 4 (each from cold SSH connections, torn down with `down` after;
DESKSIDE_BENCH_ROUNDS=N alternates N of each and compares medians). Needs root
(network namespaces) and openssh-server. Target: scale_ratio (t4 / t2) <= 1.25. Last
line: `scale_ratio: <float>`.
"""

from __future__ import annotations

import copy
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1]))

from tests import sshd_hosts
from tests.deploy_cases import ensure_tiny_model, ssh_recipe_data, write_recipe
from tests.sshd_hosts import SshHost, SshHosts, can_run, ssh_hosts
from tests.stand_in_engine import stand_in

from deskside.deploy.runtime import STAGES, deploy
from deskside.planner.inputs import plan_recipe
from deskside.recipe.load import load_recipe
from deskside.records.run import load_run
from deskside.runtime.nodes import down
from deskside.runtime.pipeline import UpOptions, UpReport
from deskside.runtime.transports import transport_for
from deskside.transport import ssh
from deskside.transport.base import Result, Transport


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

    def __init__(self, hosts: SshHosts) -> None:
        self.lock = threading.Lock()
        self.hosts = hosts
        self.stage = "(before)"
        self.seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.cpu: dict[str, tuple[float, float]] = defaultdict(lambda: (0.0, 0.0))
        self.mark = (time.process_time(), hosts_cpu(hosts))

    def say(self, msg: str) -> None:
        if msg in STAGES:
            self.close()
            self.stage = msg

    def close(self) -> None:
        """Book the CPU seconds since the last stage began: this process's, the hosts'."""
        now = (time.process_time(), hosts_cpu(self.hosts))
        mine, theirs = self.cpu[self.stage]
        self.cpu[self.stage] = (mine + now[0] - self.mark[0], theirs + now[1] - self.mark[1])
        self.mark = now

    def add(self, host: str, seconds: float) -> None:
        with self.lock:
            self.seconds[self.stage][host] += seconds


def hosts_cpu(hosts: SshHosts) -> float:
    """CPU seconds used so far by the hosts' processes (sshd and what it ran, once reaped)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for h in hosts.hosts:
        pids = subprocess.run(["ip", "netns", "pids", h.netns], capture_output=True, text=True)
        for pid in pids.stdout.split():
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / tick


def one_deploy(hosts: SshHosts, count: int, name: str, folder: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and the hosts) of one deploy."""
    python = folder / f"{name}-engine" / "python"
    recipe_path = write_recipe(folder, recipe_data(hosts, count, name, python), f"{name}.yaml")
    recipe = load_recipe(recipe_path)
    plan = plan_recipe(recipe, recipe_path)
    stand_in(python.parent, plan.kv_cache_line)
    ssh.close_all()  # every deploy starts from cold connections
    book = Book(hosts)
    plain = {n.name: transport_for(n, str(hosts.known_hosts)) for n in recipe.cluster.nodes}
    transports: dict[str, Transport] = {n: Timed(t, n, book) for n, t in plain.items()}
    options = UpOptions(known_hosts=str(hosts.known_hosts), timeout=120, poll_interval=0.1)
    t0 = time.monotonic()
    report = deploy(recipe, recipe_path, plan, options, transports=transports, progress=book.say)
    seconds = time.monotonic() - t0
    book.close()
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
    return seconds, sum(mine + theirs for mine, theirs in book.cpu.values())


def show(name: str, count: int, report: UpReport, book: Book, seconds: float) -> None:
    print(f"{name}: {count} hosts, up {seconds:.2f} s")
    for stage in report.stages:
        busy = book.seconds.get(stage.name, {})
        hosts = "  ".join(f"{h} {s:.2f}" for h, s in sorted(busy.items()))
        mine, theirs = book.cpu.get(stage.name, (0.0, 0.0))
        print(
            f"  {stage.name:<9} {stage.seconds:6.2f} s  cpu deskside {mine:5.2f} hosts "
            f"{theirs:5.2f}  busy per host: {hosts or '-'}"
        )


def plain_login_shell() -> None:
    """The hosts' sshd sets SHLVL=1 (sshd_config SetEnv), so bash, the login shell that runs
    each command, does not read ~/.bashrc (bash reads it under sshd only at shell level 1;
    SetEnv makes it 2). This machine's root ~/.bashrc runs `pyenv init` for every command
    (about 0.1 s of CPU and 0.3 s each); four hosts sharing two cores would measure that."""
    write = sshd_hosts._sshd_config

    def config(base: Path, host: SshHost) -> Path:
        path = write(base, host)
        path.write_text(path.read_text() + "SetEnv SHLVL=1\n")
        return path

    sshd_hosts._sshd_config = config


def medians(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def main() -> None:
    ok, why = can_run()
    if not ok:
        raise SystemExit(f"cannot make sshd hosts here: {why}")
    with tempfile.TemporaryDirectory(prefix="deskside-scale-") as tmp:
        base = Path(tmp)
        os.environ["DESKSIDE_HOME"] = str(base / "home")
        recipes = base / "recipes"
        ensure_tiny_model(recipes)
        shell = os.environ.get("DESKSIDE_BENCH_SHELL", "plain")
        if shell == "plain":
            plain_login_shell()
        print(f"login shell: {shell} (DESKSIDE_BENCH_SHELL=plain|as-is)")
        with ssh_hosts(base / "hosts", "s", 4, base / "node-root") as hosts:
            if os.environ.get("DESKSIDE_BENCH_WARMUP", "1") != "0":
                warm, _ = one_deploy(hosts, 2, "scale-warmup", recipes)
                print(f"(warm-up, not counted: {warm:.2f} s)")
            t2s, t4s = [], []
            for i in range(int(os.environ.get("DESKSIDE_BENCH_ROUNDS", "1"))):
                # fresh names: nothing of an earlier deploy (model folder, release) is reused
                t2s.append(one_deploy(hosts, 2, f"scale-2-r{i}", recipes))
                t4s.append(one_deploy(hosts, 4, f"scale-4-r{i}", recipes))
            ssh.close_all()
    (t2, c2), (t4, c4) = medians(t2s), medians(t4s)
    of = f" (median of {len(t2s)})" if len(t2s) > 1 else ""
    # the hosts share this machine's cores: wall time cannot shrink below CPU / cores
    print(f"cpu_seconds_2_hosts: {c2:.2f}  cpu_seconds_4_hosts: {c4:.2f}  ratio {c4 / c2:.2f}")
    print(f"deploy_seconds_2_hosts: {t2:.2f}{of}")
    print(f"deploy_seconds_4_hosts: {t4:.2f}{of}")
    print(f"scale_ratio: {t4 / t2:.3f}")


if __name__ == "__main__":
    main()
