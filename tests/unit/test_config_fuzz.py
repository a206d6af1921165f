"""Fuzz config.json values for every model type of every registered family: numbers of
every size and sign, wrong types, missing keys, nested or wrapped objects, NaN and
Infinity, each serialised to JSON and read the way `deskside plan --model-dir` reads it.

The contract: either a DesksideError with exit code 2 (a located user error), or a plan
whose counts are non-negative; never another exception, and every example in under
EXAMPLE_SECONDS. Bounded here (CI); benchmarks/config_fuzz.py runs it at full size.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deskside.errors import DesksideError
from deskside.hardware import get_profile
from deskside.planner.config_file import parse_config
from deskside.planner.plan import Plan, PlanInput, plan
from deskside.planner.registry import FAMILIES, read_arch
from deskside.planner.types import EngineRequest, Speculative
from deskside.tiny import TOKENIZER_VOCAB_TARGET, model_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_SECONDS = 2.0
CI_EXAMPLES = 200

_LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0},
}
_QWEN_MOE: dict[str, Any] = {
    **_LLAMA,
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "shared_expert_intermediate_size": 0,
    "use_sliding_window": False,
    "sliding_window": 4096,
    "max_window_layers": 28,
    "rope_scaling": None,
}
_GEMMA: dict[str, Any] = {
    **_LLAMA,
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "hidden_size": 2560,
    "num_hidden_layers": 34,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "sliding_window": 1024,
    "sliding_window_pattern": 6,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0},
}
# the tiny DeepSeek-V3 deskside generates (made on demand, not kept in git)
_DEEPSEEK_V3 = model_config("deepseek-v3", TOKENIZER_VOCAB_TARGET)
_DEEPSEEK_V4 = json.loads((ROOT / "recipes/dual-spark-deepseek-v4-flash/config.json").read_text())


# the tiny models deskside generates for the families read by vLLM's model code
_BY_TINY = {"gpt_oss": "gpt-oss", "glm4_moe": "glm4-moe", "llama4_text": "llama4"}


def _seed(model_type: str) -> dict[str, Any]:
    """A valid config.json for `model_type`."""
    if model_type in _BY_TINY:
        return model_config(_BY_TINY[model_type], TOKENIZER_VOCAB_TARGET)
    if model_type == "llama4":  # the multimodal wrapper: its language model in text_config
        text = model_config("llama4", TOKENIZER_VOCAB_TARGET)
        wrapper = ["Llama4ForConditionalGeneration"]
        return {"model_type": "llama4", "architectures": wrapper, "text_config": text}
    if model_type.startswith("deepseek_v4"):
        return copy.deepcopy(_DEEPSEEK_V4)
    if model_type.startswith("deepseek"):
        cfg = copy.deepcopy(_DEEPSEEK_V3)
        if model_type == "deepseek_v32":
            cfg.update(index_head_dim=128, index_n_heads=64)
    elif model_type.startswith("gemma"):
        cfg = copy.deepcopy(_GEMMA)
    elif "moe" in model_type:
        cfg = copy.deepcopy(_QWEN_MOE)
    else:
        cfg = copy.deepcopy(_LLAMA)
    cfg["model_type"] = model_type
    return cfg


# Every key some family reads, and a few it does not.
KEYS = sorted(
    {
        k
        for t in (
            "llama",
            "qwen3_moe",
            "gemma3",
            "deepseek_v32",
            "deepseek_v4",
            "gpt_oss",
            "glm4_moe",
            "llama4_text",
        )
        for k in _seed(t)
    }
    | {
        "head_dim",
        "layer_types",
        "sliding_window",
        "sliding_window_pattern",
        "max_window_layers",
        "use_sliding_window",
        "num_experts",
        "moe_layer_freq",
        "first_k_dense_replace",
        "n_mtp_layers",
        "o_groups",
        "hc_mult",
        "text_config",
        "dtype",
        "model_max_length",
        "seq_length",
        "rope_parameters",
    }
)
NESTED = ("rope_scaling", "quantization_config", "text_config")

EDGE_INTS = [
    0,
    1,
    -1,
    2,
    3,
    7,
    64,
    1023,
    1024,
    1025,
    4096,
    2**31 - 1,
    2**31,
    2**63,
    10**9,
    -(10**9),
]
scalars = st.one_of(
    st.sampled_from(EDGE_INTS),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-4, max_value=300),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.5, 1.0, 32.0, 1e9, 1e300, -0.0]),
    st.booleans(),
    st.none(),
    st.text(max_size=8),
    st.sampled_from(["bfloat16", "float16", "fp8", "int4", "yarn", "llama3", "mxfp4", ""]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=60), st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)
    ),
    max_leaves=12,
)
ratios = st.lists(st.sampled_from([0, 4, 128, 4.0, 7, -1, "4", None]), max_size=50)


@st.composite
def mutated(draw: st.DrawFn, model_type: str) -> dict[str, Any]:
    """A config.json of `model_type` with one to five values changed."""
    cfg = _seed(model_type)
    for _ in range(draw(st.integers(1, 5))):
        key = draw(st.sampled_from(KEYS))
        action = draw(st.sampled_from(["set", "set", "set", "delete", "nest", "ratios", "wrap"]))
        if action == "delete":
            cfg.pop(key, None)
        elif action == "nest":
            outer = draw(st.sampled_from(NESTED))
            inner = cfg.get(outer)
            if isinstance(inner, dict):
                inner[
                    draw(st.sampled_from(["factor", "rope_type", "type", "quant_method", key]))
                ] = draw(values)
            else:
                cfg[outer] = draw(values)
        elif action == "ratios":
            cfg["compress_ratios"] = draw(ratios)
        elif action == "wrap":
            cfg = {"architectures": cfg.get("architectures"), "text_config": cfg}
        else:
            cfg[key] = draw(values)
    return cfg


REQUESTS: list[tuple[str, Callable[[], tuple[EngineRequest, str]]]] = [
    ("gpu", lambda: (EngineRequest(device="gpu", device_total_bytes=80 * 2**30), "h100-80gb")),
    (
        "gpu-tp2-mtp",
        lambda: (
            EngineRequest(
                device="gpu",
                tensor_parallel_size=2,
                device_total_bytes=80 * 2**30,
                speculative=Speculative("mtp", 2),
            ),
            "h100-80gb",
        ),
    ),
    (
        "cpu",
        lambda: (EngineRequest(device="cpu", kv_cache_memory=2**30, cpu_amx=False), "cpu"),
    ),
]


def _check_plan(result: Plan) -> None:
    for name in (
        "kv_bytes_per_token",
        "block_size",
        "num_blocks",
        "kv_cache_tokens",
        "max_model_len",
        "weights_bytes",
        "needed_kv_bytes",
    ):
        assert getattr(result, name) >= 0, (name, getattr(result, name))
    assert result.max_concurrency >= 0
    assert result.model["total_params"] > 0
    assert result.model["weights_bytes_total"] > 0
    for rank in result.ranks:
        assert rank.num_blocks >= 0 and rank.kv_cache_tokens >= 0 and rank.weights_bytes >= 0


def check_config(cfg: dict[str, Any]) -> str:
    """The contract for one config (see the module docstring). Returns what it gave:
    "planned" (at least one request planned) or "user error" (exit 2 everywhere)."""
    t0 = time.perf_counter()
    data = json.dumps(cfg).encode()  # NaN and Infinity are written as such
    outcome = "user error"
    try:
        arch = read_arch(parse_config(data, Path("config.json")))
        for _, make in REQUESTS:
            req, hw = make()
            try:
                _check_plan(plan(PlanInput(arch=arch, request=req, hardware=get_profile(hw))))
                outcome = "planned"
            except DesksideError as exc:
                assert exc.exit_code == 2, exc.message
    except DesksideError as exc:
        assert exc.exit_code == 2, exc.message
        assert exc.message
    seconds = time.perf_counter() - t0
    assert seconds < EXAMPLE_SECONDS, f"{seconds:.2f} s"
    return outcome


def model_types() -> list[tuple[str, str]]:
    """(family, model_type) for every model type of every registered family."""
    return [(f.name, t) for f in FAMILIES for t in sorted(f.model_types)]


def examples_per_type(family: str, per_family: int) -> int:
    """`per_family` examples spread over the family's model types (at least 20 each)."""
    types = sum(1 for f, _ in model_types() if f == family)
    return max(-(-per_family // types), 20)


def test_every_seed_plans() -> None:
    for _, model_type in model_types():
        arch = read_arch(parse_config(json.dumps(_seed(model_type)).encode(), Path("c.json")))
        assert arch.num_hidden_layers > 0
        check_config(_seed(model_type))


@pytest.mark.parametrize(("family", "model_type"), model_types())
def test_fuzz_config_values(family: str, model_type: str) -> None:
    @settings(
        max_examples=examples_per_type(family, CI_EXAMPLES),
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(mutated(model_type))
    def run(cfg: dict[str, Any]) -> None:
        check_config(cfg)

    run()
