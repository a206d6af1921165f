"""Read vLLM's log output into events deskside understands, each with a one-line
explanation and a fix hint. Pure: feed it lines."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# update_kv_cache_capacity (vllm/v1/core/kv_cache_utils.py)
KV_CACHE_SIZE_RE = re.compile(
    r"(?P<device>[A-Z]+(?: \+ host)?) KV cache size: (?P<tokens>[\d,]+) tokens, "
    r"Maximum concurrency for (?P<max_model_len>[\d,]+) tokens per request: "
    r"(?P<concurrency>[\d.]+)x"
)
AVAILABLE_KV_RE = re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB")
# _check_enough_kv_cache_memory
REFUSAL_RE = re.compile(
    r"To serve at least one request with the model's max seq len \((?P<max_model_len>\d+)\), "
    r"\((?P<needed>[\d.]+) GiB KV cache is needed, which is larger than the available KV "
    r"cache memory \((?P<available>[\d.]+) GiB\)\.(?: Based on the available memory, the "
    r"estimated maximum model length is (?P<estimated>\d+)\.)?"
)
MAX_LEN_OVER_RE = re.compile(r"User-specified max_model_len \((?P<asked>\d+)\) is greater than")
NO_CACHE_MEMORY_RE = re.compile(r"No available memory for the cache blocks")
READY_RE = re.compile(r"Application startup complete|Uvicorn running on")
# start-up phases, one line each
# GPUModelRunner.load_model (GPU) | DefaultModelLoader.load_weights (weights read from disk)
WEIGHTS_LOADED_RE = re.compile(
    r"Model loading took (?P<gib>[\d.]+) GiB memory and (?P<seconds>[\d.]+) seconds|"
    r"Loading weights took (?P<load_seconds>[\d.]+) seconds"
)
# BaseModelLoader.load_model: the model built, its weights read next (with
# --load-format dummy, DummyModelLoader logs nothing after it: weights are then in place)
MODEL_INITIALIZED_RE = re.compile(r"Initializing model took (?P<seconds>[\d.]+) seconds")
# EngineCore._initialize_kv_caches: the KV cache allocated and the model warmed up
ENGINE_INITIALIZED_RE = re.compile(
    r"init engine \(profile, create kv cache, warmup model\) took (?P<seconds>[\d.]+) s"
)
# build_and_serve (vllm/entrypoints/launchers/api_server/entry.py): uvicorn serves next
PORT_OPEN_RE = re.compile(r"Starting vLLM server on (?P<address>\S+)")
# vLLM's log format (vllm/logger.py _FORMAT): "LEVEL MM-DD HH:MM:SS [file.py:line] text"
LOG_STAMP_RE = re.compile(
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<stamp>\d\d-\d\d \d\d:\d\d:\d\d) \["
)
LOADING_RE = re.compile(r"Starting to load model|Loading weights|Model loading took")
OOM_RE = re.compile(r"CUDA out of memory|OutOfMemoryError|Cannot allocate memory|MemoryError")
DIST_TIMEOUT_RE = re.compile(
    r"(Gloo|gloo|NCCL|nccl).*(timed out|Timeout|timeout)|DistNetworkError|"
    r"Socket Timeout|Timed out after \d+ seconds waiting for clients"
)
CONN_REFUSED_RE = re.compile(r"Connection refused|ECONNREFUSED|connect\(\) failed")
WORKER_DIED_RE = re.compile(
    r"Worker proc \S+ died|WorkerProc .*(died|failed)|EngineCore encountered a fatal error|"
    r"Engine core initialization failed|EngineDeadError"
)


@dataclass(frozen=True)
class EngineEvent:
    kind: str  # loading | kv_cache | available_kv | ready | refused | oom | ...
    line: str
    explanation: str
    hint: str | None = None
    data: dict[str, object] = field(default_factory=dict)


def _num(text: str) -> int:
    return int(text.replace(",", ""))


def log_stamp(line: str) -> str | None:
    """The "MM-DD HH:MM:SS" a vLLM log line carries (the engine's local time), if any."""
    m = LOG_STAMP_RE.search(line)
    return m["stamp"] if m else None


def parse_line(line: str) -> EngineEvent | None:
    """The event one log line carries, if any."""
    if m := KV_CACHE_SIZE_RE.search(line):
        tokens, length = _num(m["tokens"]), _num(m["max_model_len"])
        return EngineEvent(
            "kv_cache",
            line,
            f"KV cache holds {tokens:,} tokens ({m['concurrency']}x requests of {length:,})",
            data={
                "device": m["device"],
                "kv_cache_tokens": tokens,
                "max_model_len": length,
                "max_concurrency": float(m["concurrency"]),
                "max_concurrency_text": f"{m['concurrency']}x",
            },
        )
    if m := REFUSAL_RE.search(line):
        est = int(m["estimated"]) if m["estimated"] else None
        return EngineEvent(
            "refused",
            line,
            f"vLLM refused max_model_len {m['max_model_len']}: one request needs "
            f"{m['needed']} GiB of KV cache, {m['available']} GiB is available",
            hint=(f"set max_model_len to at most {est}" if est else "lower max_model_len")
            + " or give the KV cache more memory",
            data={
                "max_model_len": int(m["max_model_len"]),
                "needed_gib": float(m["needed"]),
                "available_gib": float(m["available"]),
                "estimated_max_model_len": est,
            },
        )
    if m := AVAILABLE_KV_RE.search(line):
        return EngineEvent(
            "available_kv",
            line,
            f"{m['gib']} GiB available for the KV cache",
            data={"available_gib": float(m["gib"])},
        )
    if m := MAX_LEN_OVER_RE.search(line):
        return EngineEvent(
            "refused",
            line,
            f"max_model_len {m['asked']} is over the model's own limit",
            hint="lower max_model_len to the model's max_position_embeddings",
            data={"max_model_len": int(m["asked"])},
        )
    if NO_CACHE_MEMORY_RE.search(line):
        return EngineEvent(
            "refused",
            line,
            "no memory is left for the KV cache after weights and activations",
            hint="raise gpu_memory_utilization / kv_cache_memory, or use more tensor parallelism",
        )
    if OOM_RE.search(line):
        return EngineEvent(
            "oom",
            line,
            "the engine ran out of memory",
            hint="lower gpu_memory_utilization, max_num_batched_tokens or max_num_seqs",
        )
    if DIST_TIMEOUT_RE.search(line):
        return EngineEvent(
            "distributed_timeout",
            line,
            "distributed init timed out waiting for the other nodes",
            hint="start every worker, check master address/port and the socket interface "
            "(GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME) on each node",
        )
    if CONN_REFUSED_RE.search(line):
        return EngineEvent(
            "connection_refused",
            line,
            "a node could not connect to the master",
            hint="is the head up and listening on master_addr:master_port? firewalls?",
        )
    if WORKER_DIED_RE.search(line):
        return EngineEvent(
            "worker_died",
            line,
            "an engine worker process died",
            hint="read the lines before this one in the node's log for the cause",
        )
    if m := WEIGHTS_LOADED_RE.search(line):
        seconds = m["seconds"] or m["load_seconds"]
        return EngineEvent(
            "weights_loaded",
            line,
            f"weights loaded in {float(seconds):.1f} s",
            data={"seconds": float(seconds)},
        )
    if m := MODEL_INITIALIZED_RE.search(line):
        return EngineEvent(
            "model_initialized",
            line,
            "model built; loading its weights",
            data={"seconds": float(m["seconds"])},
        )
    if m := ENGINE_INITIALIZED_RE.search(line):
        return EngineEvent(
            "kv_allocated",
            line,
            f"KV cache allocated, model warmed up ({float(m['seconds']):.1f} s)",
            data={"seconds": float(m["seconds"])},
        )
    if m := PORT_OPEN_RE.search(line):
        return EngineEvent(
            "port_open",
            line,
            f"the API server opens {m['address']}",
            data={"address": m["address"]},
        )
    if READY_RE.search(line):
        return EngineEvent("ready", line, "the API server is up")
    if LOADING_RE.search(line):
        return EngineEvent("loading", line, "loading the model")
    return None
