"""Inert-setting warnings: every rule fires in the combination where vLLM ignores the
setting, and stays quiet when the setting does something (or was never set)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from deskside.hardware import PROFILES
from deskside.planner.engine_config import resolve
from deskside.planner.inert import RULES, inert_settings
from deskside.planner.plan import PlanInput, plan
from deskside.planner.registry import family_named, read_arch
from deskside.planner.types import EngineRequest, ModelArch

GIB = 1024**3
BASE = {
    "hidden_size": 256,
    "num_attention_heads": 4,
    "vocab_size": 1000,
    "max_position_embeddings": 32768,
    "num_hidden_layers": 4,
    "intermediate_size": 512,
}
LLAMA = read_arch({**BASE, "model_type": "llama", "num_key_value_heads": 2})
DEEPSEEK_V3 = read_arch(
    {
        **BASE,
        "model_type": "deepseek_v3",
        "kv_lora_rank": 64,
        "qk_rope_head_dim": 16,
        "qk_nope_head_dim": 32,
        "v_head_dim": 32,
        "num_nextn_predict_layers": 1,
    }
)
V4_CONFIG = Path(__file__).parents[2] / "recipes" / "dual-spark-deepseek-v4-flash" / "config.json"

CPU = {"device": "cpu", "kv_cache_memory": GIB, "max_model_len": 4096}


@dataclass(frozen=True)
class Case:
    setting: str  # the rule expected (or not) to fire
    arch: ModelArch
    request: EngineRequest
    fires: bool


def fired(arch: ModelArch, req: EngineRequest) -> set[str]:
    settings = resolve(arch, req, family_named(arch.family).engine_defaults(arch))
    return {rule.setting for rule in RULES if rule.applies(req, settings)}


BREAKABLE = "engine.env VLLM_USE_BREAKABLE_CUDAGRAPH"
SPACE = "engine.env VLLM_CPU_KVCACHE_SPACE"
CASES = [
    # CUDA graphs are off under enforce_eager: the variable does nothing...
    Case(
        BREAKABLE,
        LLAMA,
        EngineRequest(env={"VLLM_USE_BREAKABLE_CUDAGRAPH": "0"}, enforce_eager=True),
        True,
    ),
    Case(
        BREAKABLE,
        LLAMA,
        EngineRequest(env={"VLLM_USE_BREAKABLE_CUDAGRAPH": "1"}, enforce_eager=True),
        True,
    ),
    # ...but it picks the capture mode when graphs are on, and eager alone warns nothing.
    Case(BREAKABLE, LLAMA, EngineRequest(env={"VLLM_USE_BREAKABLE_CUDAGRAPH": "0"}), False),
    Case(BREAKABLE, LLAMA, EngineRequest(enforce_eager=True), False),
    # async scheduling: off on CPU, effective on GPU
    Case("engine.async_scheduling", LLAMA, EngineRequest(**CPU, async_scheduling=True), True),
    Case("engine.async_scheduling", LLAMA, EngineRequest(async_scheduling=True), False),
    # chunked prefill / prefix caching: forced off for MLA on CPU, only reported when set
    Case(
        "engine.enable_chunked_prefill",
        DEEPSEEK_V3,
        EngineRequest(**CPU, enable_chunked_prefill=True),
        True,
    ),
    Case("engine.enable_chunked_prefill", DEEPSEEK_V3, EngineRequest(**CPU), False),
    Case(
        "engine.enable_chunked_prefill",
        LLAMA,
        EngineRequest(**CPU, enable_chunked_prefill=True),
        False,
    ),
    Case(
        "engine.enable_chunked_prefill",
        DEEPSEEK_V3,
        EngineRequest(enable_chunked_prefill=True),
        False,
    ),
    Case(
        "engine.enable_prefix_caching",
        DEEPSEEK_V3,
        EngineRequest(**CPU, enable_prefix_caching=True),
        True,
    ),
    Case("engine.enable_prefix_caching", DEEPSEEK_V3, EngineRequest(**CPU), False),
    Case(
        "engine.enable_prefix_caching",
        LLAMA,
        EngineRequest(**CPU, enable_prefix_caching=True),
        False,
    ),
    # block_size: the CPU MLA kernels force 16; other models and GPUs keep the user's
    Case("engine.block_size", DEEPSEEK_V3, EngineRequest(**CPU, block_size=32), True),
    Case("engine.block_size", DEEPSEEK_V3, EngineRequest(**CPU, block_size=16), False),
    Case("engine.block_size", LLAMA, EngineRequest(**CPU, block_size=32), False),
    Case("engine.block_size", DEEPSEEK_V3, EngineRequest(block_size=32), False),
    # max_num_batched_tokens: the CPU MLA path sets max(max_model_len 4096, 2048) = 4096
    Case(
        "engine.max_num_batched_tokens",
        DEEPSEEK_V3,
        EngineRequest(**CPU, max_num_batched_tokens=8192),
        True,
    ),
    Case(
        "engine.max_num_batched_tokens",
        DEEPSEEK_V3,
        EngineRequest(**CPU, max_num_batched_tokens=4096),
        False,
    ),
    Case(
        "engine.max_num_batched_tokens",
        LLAMA,
        EngineRequest(**CPU, max_num_batched_tokens=8192),
        False,
    ),
    # gpu_memory_utilization: unused on CPU with an explicit KV size; still gates GPU start-up
    Case(
        "engine.gpu_memory_utilization",
        LLAMA,
        EngineRequest(**CPU, gpu_memory_utilization=0.5),
        True,
    ),
    Case(
        "engine.gpu_memory_utilization",
        LLAMA,
        EngineRequest(kv_cache_memory=GIB, gpu_memory_utilization=0.5),
        False,
    ),
    # VLLM_CPU_KVCACHE_SPACE replaces kv_cache_memory on CPU (when non-empty)...
    Case(
        "engine.kv_cache_memory",
        LLAMA,
        EngineRequest(**CPU, env={"VLLM_CPU_KVCACHE_SPACE": "4"}),
        True,
    ),
    Case(
        "engine.kv_cache_memory",
        LLAMA,
        EngineRequest(**CPU, env={"VLLM_CPU_KVCACHE_SPACE": ""}),
        False,
    ),
    Case(
        "engine.kv_cache_memory",
        LLAMA,
        EngineRequest(kv_cache_memory=GIB, env={"VLLM_CPU_KVCACHE_SPACE": "4"}),
        False,
    ),
    # ...and nothing reads it on GPU.
    Case(SPACE, LLAMA, EngineRequest(env={"VLLM_CPU_KVCACHE_SPACE": "4"}), True),
    Case(SPACE, LLAMA, EngineRequest(**CPU, env={"VLLM_CPU_KVCACHE_SPACE": "4"}), False),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.setting}-{c.fires}" for c in CASES])
def test_rule(case: Case) -> None:
    assert (case.setting in fired(case.arch, case.request)) is case.fires


def test_every_rule_has_a_positive_and_a_negative_case() -> None:
    for rule in RULES:
        outcomes = {c.fires for c in CASES if c.setting == rule.setting}
        assert outcomes == {True, False}, rule.setting


def test_a_plain_request_warns_nothing() -> None:
    assert fired(LLAMA, EngineRequest()) == set()
    assert fired(DEEPSEEK_V3, EngineRequest(**CPU)) == set()


def test_breakable_cudagraph_warning_names_both_settings_and_asks() -> None:
    req = EngineRequest(env={"VLLM_USE_BREAKABLE_CUDAGRAPH": "0"}, enforce_eager=True)
    settings = resolve(LLAMA, req, family_named("llama").engine_defaults(LLAMA))
    (warning,) = inert_settings(req, settings)
    assert "VLLM_USE_BREAKABLE_CUDAGRAPH=0" in warning
    assert "enforce_eager" in warning and "Which does the recipe mean?" in warning


def test_messages_say_what_vllm_does_instead() -> None:
    req = EngineRequest(**CPU, block_size=32, max_num_batched_tokens=8192)
    settings = resolve(DEEPSEEK_V3, req, family_named("deepseek_v3").engine_defaults(DEEPSEEK_V3))
    warnings = inert_settings(req, settings)
    assert "block_size 32 has no effect: vLLM's CPU backend forces block_size 16" in warnings[0]
    assert "max_num_batched_tokens 8192 has no effect" in warnings[1]
    assert "sets it to 4096" in warnings[1]


def test_plan_carries_the_warnings() -> None:
    p = plan(PlanInput(LLAMA, EngineRequest(**CPU, async_scheduling=True), PROFILES["cpu"]))
    assert any(w.startswith("async_scheduling has no effect") for w in p.warnings)
    assert p.engine["async_scheduling"] is False


def test_deepseek_v4_block_size_is_forced_on_cpu() -> None:
    arch = read_arch(json.loads(V4_CONFIG.read_text()))
    assert "engine.block_size" in fired(arch, EngineRequest(**CPU, block_size=64))
    # V4's CPU kernels are AMX kernels: with AMX tiles they keep chunked prefill; without,
    # vLLM turns it off as for any MLA model on CPU
    assert "engine.enable_chunked_prefill" not in fired(
        arch, EngineRequest(**CPU, enable_chunked_prefill=True, cpu_amx=True)
    )
    assert "engine.enable_chunked_prefill" in fired(
        arch, EngineRequest(**CPU, enable_chunked_prefill=True, cpu_amx=False)
    )


def test_recipe_defaults_are_not_reported_only_what_the_recipe_sets() -> None:
    from deskside.hardware import get_profile
    from deskside.planner.inputs import Overrides, request_from_recipe
    from deskside.recipe.load import load_recipe_text

    path = Path(__file__).parents[2] / "recipes" / "local-tiny.yaml"
    text = path.read_text()
    recipe = load_recipe_text(text, str(path))
    req = request_from_recipe(recipe, get_profile("cpu"), Overrides())
    assert req.enable_chunked_prefill is True and req.enable_prefix_caching is True
    assert {"engine.enable_chunked_prefill", "engine.enable_prefix_caching"} <= fired(
        DEEPSEEK_V3, req
    )
    # the same recipe without the two lines leaves vLLM's defaults: nothing to report
    trimmed = "\n".join(
        line
        for line in text.splitlines()
        if not line.lstrip().startswith(("enable_chunked_prefill:", "enable_prefix_caching:"))
    )
    req = request_from_recipe(load_recipe_text(trimmed, str(path)), get_profile("cpu"), Overrides())
    assert req.enable_chunked_prefill is None and req.enable_prefix_caching is None
    assert fired(DEEPSEEK_V3, req) == set()
