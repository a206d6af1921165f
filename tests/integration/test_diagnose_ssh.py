"""`deskside diagnose` over real SSH: two network-namespace hosts with sshd
(`tests/sshd_hosts.py`), each running a fake engine started the way deskside starts one (a
session of its own through `Transport.spawn`, tagged with DESKSIDE_RUN, its pid, start time
and log in the node's state file): a shell leader, a Python child with two more threads and
the engine key on its command line, and a child stopped with SIGSTOP. The engine key, a
Hugging Face token and a bearer header are planted in its environment and its log; the key
files sit where deskside keeps them (this machine's secrets folder, the node's R/N/secrets).

The bundle must hold both nodes' logs, process trees with every state, and stacks of every
process, and no planted secret anywhere in the archive.

Needs root, iproute2 and openssh-server (scripts/system-deps installs them)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deskside.layout import ENGINE_KEY_ENV
from deskside.recipe.cluster import Ssh
from deskside.records.node import NodeState, write_state
from deskside.records.run import RunNode, RunRecord, save_run
from deskside.records.where import run_file
from deskside.runtime.control import run_tag
from deskside.runtime.node_sh import RUN_TAG, parse_proc_start, proc_start
from deskside.runtime.transports import transport_for
from deskside.secrets import engine_env_path, write_secret_file
from deskside.transport import ssh

from ..cli_process import deskside
from ..deploy_cases import ensure_tiny_model, ssh_recipe_data, write_recipe
from ..sshd_hosts import SshHosts, can_run, ssh_hosts

pytestmark = pytest.mark.integration

NAME = "diag-ssh"
LOCAL_KEY = "LocalEngineKey0123456789"  # this machine's engine key file: known-secret only
NODE_KEYS = ("NodeZeroEngineKey98765", "NodeOneEngineKey456789")  # each node's key file
HF = "hf_" + "DiagPlantedTokenAbcdefghij0123456789"

# The fake engine: its log gets every secret, its Python child carries the key in argv.
ENGINE_SH = r"""
echo "fake engine ready"
echo "env: $ENGINE_KEY_NAME=$KEY"
echo "key in a sentence: $KEY and $LOCAL"
echo "header Authorization: Bearer $KEY"
echo "downloading with $HF_TOKEN"
python3 -c 'import threading, time
[threading.Thread(target=time.sleep, args=(300,), daemon=True).start() for _ in range(2)]
time.sleep(300)' --api-key "$KEY" &
sleep 300 &
s=$!
# stop it once it runs `sleep` (a stop right after the fork would catch the shell's copy)
i=0; while [ "$(cat /proc/$s/comm)" != sleep ] && [ $i -lt 500 ]; do i=$((i+1)); done
kill -STOP $s
wait
"""


@dataclass(frozen=True)
class Setup:
    hosts: SshHosts
    run: RunRecord
    pids: tuple[int, int]  # the engines' session leaders
    home: Path
    base: Path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, session_home: Path) -> Iterator[Setup]:
    ok, why = can_run()
    if not ok:
        pytest.skip(why)
    base = tmp_path_factory.mktemp("diagnose")
    with (
        pytest.MonkeyPatch.context() as env,  # the run's records and keys: the test's home
        ssh_hosts(base / "hosts", "g", 2, base / "node-root") as hosts,
    ):
        env.setenv("DESKSIDE_HOME", str(session_home))
        h0, h1 = hosts.hosts
        root = hosts.private_root / "deskside"
        hf_cache = base / "hf-cache"
        hf_cache.mkdir()
        (hf_cache / "token").write_text(HF + "\n")
        data = ssh_recipe_data(
            addresses=(h0.address, h1.address),
            interfaces=(h0.interface, h1.interface),
            identity_file=str(hosts.identity_file),
            root=str(root),
            hf_cache=str(hf_cache),
            name=NAME,
        )
        # the wedge test below: short limits, no recovery
        data["survive"] = {"stall_seconds": 5, "stopped_seconds": 2, "interval": 1}
        recipes = base / "recipes"
        recipe = write_recipe(recipes, data)
        ensure_tiny_model(recipes)
        write_secret_file(engine_env_path(NAME), (f"{ENGINE_KEY_ENV}={LOCAL_KEY}" + "\n").encode())
        nodes = [
            RunNode(
                name=f"node{i}",
                role="head" if i == 0 else "worker",
                node_rank=i,
                address=h.address,
                ssh=Ssh(user="root", port=22, identity_file=str(hosts.identity_file)),
                recipe_dir=str(root / NAME),
            )
            for i, h in enumerate(hosts.hosts)
        ]
        run = RunRecord(
            recipe=str(recipe),
            recipe_name=NAME,
            runtime="ssh",
            control="process",
            runtime_kind="native",
            unit=f"deskside-{NAME}",
            compose_project=f"deskside-{NAME}",
            api_url=f"http://{h0.address}:8888",  # nothing listens: recorded as an error
            proxy_url=None,
            served_names=["tiny"],
            known_hosts=str(hosts.known_hosts),
            started_at="2026-01-01T00:00:00Z",
            nodes=nodes,
        )
        pids = []
        for node, key in zip(nodes, NODE_KEYS, strict=True):
            t = transport_for(node, run.known_hosts)
            layout = run.layout(node)
            t.run(["mkdir", "-p", "--", layout.logs, layout.secrets])
            t.put(f"{ENGINE_KEY_ENV}={key}\n".encode(), layout.engine_env, 0o600)
            state = NodeState(
                recipe=NAME,
                node=node.name,
                role=node.role,
                node_rank=node.node_rank,
                release=None,
                control="process",
                log=f"{layout.logs}/engine.log",
                started_at="2026-01-01T00:00:00+00:00",
            )
            tag = run_tag(state, "engine")
            env = {
                RUN_TAG: tag,
                "KEY": key,
                "LOCAL": LOCAL_KEY,
                "ENGINE_KEY_NAME": ENGINE_KEY_ENV,
                "HF_TOKEN": HF,
            }
            assert state.log is not None
            pid = t.spawn(["sh", "-c", ENGINE_SH], env=env, log_path=state.log)
            start = parse_proc_start(t.run(proc_start(pid)).stdout)
            write_state(
                t, layout, state.model_copy(update={"pid": pid, "pid_start": start, "run_tag": tag})
            )
            pids.append(pid)
        save_run(run)
        time.sleep(0.5)  # the Python children start their threads
        try:
            yield Setup(hosts, run, (pids[0], pids[1]), session_home, base)
        finally:
            run_file(NAME).unlink(missing_ok=True)
            ssh.close_all()


def _extract(path: Path) -> dict[str, str]:
    with tarfile.open(path) as tar:
        return {
            m.name.split("/", 1)[1]: (tar.extractfile(m) or io.BytesIO()).read().decode()
            for m in tar.getmembers()
            if m.isfile()
        }


def test_diagnose_bundles_both_nodes_without_secrets(setup: Setup) -> None:
    out = setup.base / "bundles"
    t0 = time.monotonic()
    r = deskside(
        "diagnose",
        NAME,
        "--out",
        str(out),
        "--reason",
        "integration test",
        "--json",
        home=setup.home,
        timeout=300,
    )
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    path = Path(report["bundle"])
    assert path.parent == out and path.name.startswith(f"deskside-diagnose-{NAME}-")
    files = _extract(path)
    assert sorted(files) == sorted(report["members"])

    for i, pid in enumerate(setup.pids):
        base = f"nodes/node{i}"
        assert "fake engine ready" in files[f"{base}/engine.log"]
        tree = json.loads(files[f"{base}/processes.json"])
        procs = {p["pid"]: p for p in tree["procs"]}
        assert pid in procs and len(procs) == 3, tree
        assert sorted(p["state"] for p in procs.values() if p["ppid"] == pid) == ["S", "T"]
        python = next(p for p in procs.values() if p["name"] == "python3")
        assert python["threads"] == 3 and len(python["tasks"]) == 3
        text = files[f"{base}/processes.txt"]
        assert f"session {pid}" in text and "[REDACTED]" in text
        stacks = files[f"{base}/stacks.txt"]
        for p in procs.values():
            assert f"=== process {p['pid']} ({p['name']})" in stacks
            for task in p["tasks"]:
                assert f"--- thread {task['tid']} ({task['name']}) state {task['state']}" in stacks
        assert "[<0>]" in stacks or "(kernel stack not readable)" in stacks
        assert json.loads(files[f"{base}/state.json"])["pid"] == pid

    manifest = json.loads(files["MANIFEST.json"])
    assert manifest["reason"] == "integration test"
    by_name = {m["name"]: m for m in manifest["members"]}
    assert by_name["nodes/node0/engine.log"]["redactions"] >= 5
    assert "cluster/status.json" in files and "cluster/plan.json" in files
    assert json.loads(files["cluster/status.json"])["nodes"][0]["state"] == "running"
    assert any(e.startswith("cluster/engine-metrics.txt: ") for e in report["errors"])

    raw = gzip.decompress(path.read_bytes())
    for secret in (LOCAL_KEY, *NODE_KEYS, HF):
        assert secret.encode() not in raw, secret
        assert secret not in r.stdout and secret not in r.stderr
    print(f"diagnose over two sshd hosts: {took:.1f} s, {len(files)} members, {len(raw)} bytes")


# A stand-in for the head's API: healthy, one request running, the token counter still.
METRICS_SH = r"""
exec python3 -c '
import http.server
BODY = b"vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:generation_tokens_total 5\n"
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(BODY)
    def log_message(self, *a): pass
http.server.HTTPServer(("$ADDR", 8888), H).serve_forever()'
"""


def test_status_over_ssh_names_the_stopped_processes_of_a_wedge(setup: Setup) -> None:
    """`status` samples each node's engine session over SSH (state letters, CPU time, log
    silence): with a request running, no token moving and a stopped process on each node,
    the series of looks says WEDGED and names both nodes."""
    from deskside.operate.status import status
    from deskside.records.where import looks_file

    run = setup.run.model_copy(update={"ready_at": "2026-01-01T00:00:01Z"})
    head = run.nodes[0]
    t = transport_for(head, run.known_hosts)
    api = t.spawn(
        ["sh", "-c", METRICS_SH.replace("$ADDR", head.address)],
        log_path=f"{run.layout(head).logs}/api.log",
    )
    try:
        seen = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            st = status(run)
            seen.append(st.cluster)
            if st.cluster == "WEDGED":
                break
            time.sleep(0.5)
        assert st.cluster == "WEDGED", (seen, st.reasons)
        assert seen[0] == "READY"  # the first looks: not stalled long enough yet
        assert st.suspects == ["node0", "node1"]
        text = "\n".join(st.reasons)
        for node, _pid in zip(("node0", "node1"), setup.pids, strict=True):
            assert f"{node} (head)" in text or f"{node} (worker)" in text
        assert "is stopped (state T)" in text and "sleep" in text
        assert st.stalled_seconds is not None and st.stalled_seconds >= 2
        assert looks_file(NAME).is_file()
    finally:
        t.run(["kill", str(api)])
        looks_file(NAME).unlink(missing_ok=True)
