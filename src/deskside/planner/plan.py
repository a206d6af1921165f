"""The planner: from a model, an engine request and the hardware, exactly what vLLM will
do with memory on every rank — before anything starts. Pure: no I/O.

Memory on a GPU rank (vLLM Worker.determine_available_memory):

    requested   = total x gpu_memory_utilization
    available   = requested - weights - non-KV memory (activation peak, workspaces,
                  NCCL/CUDA buffers) - CUDA-graph estimate (only when opted in)

or `kv_cache_memory` exactly when given (it bypasses profiling). On CPU the KV memory is
always explicit. The KV side (blocks, tokens, concurrency, the refusal and the estimated
maximum length) is vLLM's own arithmetic (deskside.planner.kv); the non-KV side on GPU is an
estimate, each model family's own (deskside.planner.families), whose sources the plan prints.
The plan also warns about settings that have no effect in the chosen combination
(deskside.planner.inert).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from deskside.errors import UsageError
from deskside.hardware import HardwareProfile
from deskside.planner.data_parallel import moe_findings
from deskside.planner.engine_config import resolve
from deskside.planner.families.base import Family
from deskside.planner.inert import inert_settings
from deskside.planner.kv import Accounting, KVGroup, Limits
from deskside.planner.rank_weights import (
    Split,
    data_parallel_notes,
    pp_partitions,
    rank_weight_bytes,
)
from deskside.planner.registry import family_named
from deskside.planner.types import (
    EngineRequest,
    EngineSettings,
    ModelArch,
    NonKVEstimate,
)
from deskside.planner.verify_rows import verify_rows_warning
from deskside.units import GIB, format_gib


class RankPlan(BaseModel):
    """One engine rank (one GPU, or one CPU process)."""

    model_config = ConfigDict(extra="forbid")

    rank: int
    node: str | None = None
    data_parallel_rank: int = 0
    kv_bytes_per_token: int = Field(description="KV bytes one token costs in every layer")
    block_size: int
    num_blocks: int
    bytes_per_block: int
    kv_cache_tokens: int = Field(description='vLLM\'s "KV cache size: N tokens"')
    max_concurrency: float = Field(description="requests of max_model_len that fit at once")
    max_model_len: int
    fits: bool
    needed_kv_bytes: int = Field(description="KV memory one max_model_len request needs")
    available_kv_bytes: int
    estimated_max_model_len: int | None
    weights_bytes: int
    non_kv_bytes: int
    non_kv_breakdown: dict[str, int]
    kv_groups: list[dict[str, Any]]
    warnings: list[str]


class NodeMemory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hardware: str
    unified: bool
    total_bytes: int
    vllm_budget_bytes: int
    headroom_bytes: int
    safety_floor_bytes: int


class Plan(BaseModel):
    """What vLLM will do with memory, per rank, and whether it is safe."""

    model_config = ConfigDict(extra="forbid")

    model: dict[str, Any]
    engine: dict[str, Any]
    ranks: list[RankPlan]
    memory: NodeMemory | None
    # the limiting rank's figures, repeated at the top for scripts
    kv_bytes_per_token: int
    block_size: int
    num_blocks: int
    kv_cache_tokens: int
    max_concurrency: float
    max_model_len: int
    fits: bool
    estimated_max_model_len: int | None
    weights_bytes: int
    needed_kv_bytes: int
    available_kv_bytes: int
    refusal: str | None
    warnings: list[str]
    assumptions: list[str]
    kv_cache_line: str = Field(description="the line vLLM logs for this capacity")


@dataclass(frozen=True)
class PlanInput:
    arch: ModelArch
    request: EngineRequest
    hardware: HardwareProfile
    weights_format: str | None = None
    min_headroom: int | None = None  # overrides the hardware profile's safety floor
    node_names: tuple[str, ...] = ()


def vllm_gib(n: int) -> str:
    """vllm.utils.mem_utils.format_gib: round(bytes / GiB, 2) printed as Python does."""
    return f"{round(n / GIB, 2)}"


def vllm_refusal(max_model_len: int, needed: int, available: int, estimated: int) -> str:
    """_check_enough_kv_cache_memory's message, word for word (vLLM 0.32)."""
    estimated_msg = (
        f"Based on the available memory, the estimated maximum model length is {estimated}. "
        if estimated > 0
        else ""
    )
    return (
        f"To serve at least one request with the model's max seq len ({max_model_len}), "
        f"({vllm_gib(needed)} GiB KV cache is needed, which is larger than "
        f"the available KV cache memory ({vllm_gib(available)} GiB). "
        f"{estimated_msg}Try increasing `gpu_memory_utilization` (which also controls CPU "
        "memory on the CPU backend) or decreasing `max_model_len` when initializing the engine."
    )


def kv_cache_line(device: str, tokens: int, max_model_len: int, concurrency: float) -> str:
    """update_kv_cache_capacity's log line."""
    name = "GPU" if device == "gpu" else device.upper()
    return (
        f"{name} KV cache size: {tokens:,} tokens, Maximum concurrency for "
        f"{max_model_len:,} tokens per request: {concurrency:.2f}x"
    )


def _group_summary(groups: list[KVGroup], acct: Accounting, limits: Limits) -> list[dict[str, Any]]:
    lim = acct.effective_limits(limits)
    return [
        {
            "layers": len(g.layers),
            "types": sorted({s.type for s in g.specs}),
            "block_size": g.specs[0].block_size,
            "page_size_bytes": g.page_size_bytes,
            "blocks_per_request": g.blocks_per_request(lim),
        }
        for g in groups
    ]


def _kv_bytes_per_token(groups: list[KVGroup], layers: set[str]) -> int:
    """KV bytes one token costs in every cached layer of a rank (pages / block size)."""
    return sum(
        sp.page_size_bytes // sp.block_size
        for g in groups
        for name, sp in zip(g.layers, g.specs, strict=True)
        if name in layers and sp.type != "mamba"  # a recurrent state has no per-token cost
    )


def layer_stages(arch: ModelArch, names: list[str], pp: int) -> dict[str, int]:
    """Pipeline stage of every cached layer; draft (MTP) layers run on the last stage."""
    bounds = []
    start = 0
    for count in pp_partitions(arch.num_hidden_layers, pp):
        bounds.append((start, start + count))
        start += count
    stages = {}
    for name in names:
        index = int(name.split("model.layers.", 1)[1].split(".", 1)[0])
        stage = next((s for s, (lo, hi) in enumerate(bounds) if lo <= index < hi), pp - 1)
        stages[name] = stage
    return stages


@dataclass(frozen=True)
class StageMemory:
    """One pipeline stage's rank: its weights, its KV memory, its view of the pool."""

    stage: int
    acct: Accounting
    weights: int
    available: int
    budget: int  # what vLLM may use on the device (for headroom)

    @property
    def check_memory(self) -> int:
        return self.acct.check_memory(self.available)


def plan(inp: PlanInput) -> Plan:
    arch, hw = inp.arch, inp.hardware
    req = inp.request
    family: Family = family_named(arch.family)
    settings = resolve(arch, req, family.engine_defaults(arch))
    warnings: list[str] = inert_settings(req, settings)
    assumptions: list[str] = []
    tp, pp = settings.tensor_parallel_size, settings.pipeline_parallel_size
    dp = settings.data_parallel_size
    split = Split(tp, pp, dp, settings.enable_expert_parallel)
    warnings += moe_findings(
        enable_expert_parallel=settings.enable_expert_parallel,
        data_parallel_size=dp,
        is_moe=arch.moe is not None,
    )[1]

    specs = family.layer_specs(arch, settings)
    acct = family.accounting(specs, settings)
    groups = list(acct.groups)

    # max_model_len: the request, or the model's limit when auto-fitting.
    derived = settings.derived_max_model_len
    auto = settings.max_model_len is None
    max_model_len = derived if auto else int(settings.max_model_len or derived)
    over_limit: str | None = None
    if not auto and max_model_len > derived:
        # _get_and_verify_max_len's message (vLLM 0.32)
        over_limit = (
            f"User-specified max_model_len ({max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={derived} or model_max_length=None in "
            "model's config.json)."
        )
        if req.allow_long_max_model_len:
            warnings.append(
                f"{over_limit} Allowed by VLLM_ALLOW_LONG_MAX_MODEL_LEN=1: positions past "
                "the model's limit can produce NaNs (RoPE) or out-of-bounds errors"
            )
            over_limit = None
        else:
            over_limit += " To allow overriding this maximum, set the env var "
            over_limit += "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
    limits = Limits(max_model_len=max_model_len, max_in_flight_tokens=settings.max_in_flight_tokens)
    # CPU ranks need no non-KV estimate: their KV memory is explicit.
    overhead = (
        NonKVEstimate()
        if settings.device == "cpu"
        else family.non_kv(arch, settings, max_model_len)
    )
    if req.device == "cpu" and req.kv_cache_memory is None:
        raise_missing_cpu_kv()

    stage_of = layer_stages(arch, list(specs), pp)
    drafts = family.draft_layers_loaded(arch, settings)
    stages: list[StageMemory] = []
    for stage in range(pp):
        mine = {name for name, st in stage_of.items() if st == stage}
        stage_acct = acct.project(mine) if pp > 1 else acct
        weights = rank_weight_bytes(arch, inp.weights_format, split, drafts, stage)
        if req.kv_cache_memory is not None:
            available = req.kv_cache_memory
            budget = weights + overhead.total + available if req.device == "gpu" else available
        else:
            requested = -(-int(hw.total_bytes * settings.gpu_memory_utilization * 1000) // 1000)
            available = requested - weights - overhead.total
            budget = requested
        stages.append(StageMemory(stage, stage_acct, weights, available, budget))
    first = stages[0]
    if req.kv_cache_memory is not None:
        assumptions.append(
            f"KV cache memory is fixed at {format_gib(req.kv_cache_memory)} per rank "
            "(kv_cache_memory / VLLM_CPU_KVCACHE_SPACE): vLLM skips memory profiling"
        )
    else:
        assumptions.append(
            f"{hw.name}: {format_gib(hw.total_bytes)} reported per device x "
            f"gpu_memory_utilization {settings.gpu_memory_utilization} = "
            f"{format_gib(first.budget)} for vLLM; weights {format_gib(first.weights)} and "
            f"non-KV {format_gib(overhead.total)} come off it"
        )
    if pp > 1:
        assumptions.append(
            f"pipeline stages hold {pp_partitions(arch.num_hidden_layers, pp)} layers "
            "(vLLM's get_pp_indices); every rank gets the smallest stage's block count"
        )
    assumptions.extend(acct.notes)
    assumptions.extend(data_parallel_notes(arch, split, max(st.weights for st in stages)))
    assumptions.extend(overhead.sources)

    memory: NodeMemory | None = None
    if hw.total_bytes > 0:
        floor = inp.min_headroom if inp.min_headroom is not None else hw.safety_floor_bytes
        budget = max(st.budget for st in stages)
        memory = NodeMemory(
            hardware=hw.name,
            unified=hw.unified,
            total_bytes=hw.total_bytes,
            vllm_budget_bytes=budget,
            headroom_bytes=hw.total_bytes - budget - overhead.outside_budget,
            safety_floor_bytes=floor,
        )

    refusal: str | None = None
    estimated: int | None = None
    if auto:
        # _auto_fit_max_model_len: the longest length every stage can hold
        fit = min(st.acct.estimate_max_model_len(limits, st.check_memory) for st in stages)
        if fit <= 0:
            refusal = (
                "Cannot auto-fit max_model_len: not enough GPU memory available to serve "
                "even a single token. Try increasing `gpu_memory_utilization`."
            )
        else:
            max_model_len = min(fit, derived)
            limits = Limits(max_model_len, limits.max_in_flight_tokens)
            assumptions.append(f"max_model_len auto: {max_model_len:,} fits (vLLM's auto-fit)")
    needed = [st.acct.needed(limits) for st in stages]
    failing = next(
        (st for st, need in zip(stages, needed, strict=True) if need > st.check_memory), None
    )
    if over_limit is not None:
        refusal = over_limit
    elif any(st.available <= 0 for st in stages):
        refusal = (
            "No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine."
        )
    elif failing is not None and refusal is None:
        estimated = failing.acct.estimate_max_model_len(limits, failing.check_memory)
        refusal = vllm_refusal(
            max_model_len, needed[failing.stage], failing.check_memory, estimated
        )

    if memory is not None and hw.unified and memory.headroom_bytes < memory.safety_floor_bytes:
        freeze = (
            f"unified-memory headroom {format_gib(memory.headroom_bytes)} on {hw.name} is "
            f"below the safety floor {format_gib(memory.safety_floor_bytes)}: the host can "
            "freeze (CPU and GPU share this memory and vLLM does not enforce its budget "
            "during start-up). Lower gpu_memory_utilization"
        )
        refusal = f"{refusal}\n{freeze}" if refusal else freeze

    # get_kv_cache_configs: every rank gets the smallest block count; the capacity line
    # divides it by the blocks one request needs across all groups.
    caps = [st.acct.capacity(limits, st.available) for st in stages]
    cap = min(caps, key=lambda c: c.num_blocks)

    if settings.speculative is not None and settings.max_num_scheduled_tokens < 8192:
        warnings.append(
            f"max_num_scheduled_tokens is set to {settings.max_num_scheduled_tokens} based on "
            "the speculative decoding settings. This may lead to suboptimal performance. "
            "Consider increasing max_num_batched_tokens to accommodate the additional draft "
            "token slots, or decrease num_speculative_tokens."
        )
    if (rows := verify_rows_warning(arch, settings)) is not None:
        warnings.append(rows)
    if settings.max_num_seqs and cap.max_concurrency < settings.max_num_seqs and refusal is None:
        warnings.append(
            f"max_num_seqs {settings.max_num_seqs} but only {cap.max_concurrency:.2f} requests "
            f"of {max_model_len:,} tokens fit in the KV cache: long requests will queue or be "
            "preempted"
        )

    fits = refusal is None
    ranks = []
    world = dp * tp * pp  # GPU ranks: DP rank by DP rank, each TP x PP
    for rank in range(world):
        st = stages[rank % (tp * pp) // tp]
        node = None
        if inp.node_names:
            per_node = max(1, world // len(inp.node_names))
            node = inp.node_names[min(rank // per_node, len(inp.node_names) - 1)]
        stage_groups = [g for g in groups if any(stage_of[name] == st.stage for name in g.layers)]
        ranks.append(
            RankPlan(
                rank=rank,
                node=node,
                data_parallel_rank=rank // (tp * pp),
                kv_bytes_per_token=_kv_bytes_per_token(
                    [g for g in groups], {n for n, x in stage_of.items() if x == st.stage}
                ),
                block_size=acct.block_size or settings.block_size,
                num_blocks=cap.num_blocks,
                bytes_per_block=st.acct.bytes_per_block,
                kv_cache_tokens=cap.kv_cache_tokens,
                max_concurrency=round(cap.max_concurrency, 4),
                max_model_len=max_model_len,
                fits=fits,
                needed_kv_bytes=needed[st.stage],
                available_kv_bytes=st.available,
                estimated_max_model_len=estimated,
                weights_bytes=st.weights,
                non_kv_bytes=overhead.total,
                non_kv_breakdown=dict(overhead.parts),
                kv_groups=_group_summary(stage_groups, acct, limits),
                warnings=warnings,
            )
        )
    r0 = ranks[0]
    return Plan(
        model=_model_summary(arch, inp.weights_format),
        engine=_engine_summary(settings, max_model_len, acct.block_size),
        ranks=ranks,
        memory=memory,
        kv_bytes_per_token=r0.kv_bytes_per_token,
        block_size=r0.block_size,
        num_blocks=r0.num_blocks,
        kv_cache_tokens=r0.kv_cache_tokens,
        max_concurrency=r0.max_concurrency,
        max_model_len=max_model_len,
        fits=fits,
        estimated_max_model_len=estimated,
        weights_bytes=r0.weights_bytes,
        needed_kv_bytes=max(needed),
        available_kv_bytes=min(st.available for st in stages),
        refusal=refusal,
        warnings=warnings,
        assumptions=assumptions,
        kv_cache_line=kv_cache_line(
            settings.device, cap.kv_cache_tokens, max_model_len, cap.max_concurrency
        ),
    )


def raise_missing_cpu_kv() -> None:
    raise UsageError(
        "vLLM on CPU needs an explicit KV cache size",
        hint="set engine.kv_cache_memory in the recipe (e.g. 1GiB) or pass --kv-cache-memory",
    )


def _model_summary(arch: ModelArch, weights_format: str | None) -> dict[str, Any]:
    kinds: dict[str, int] = {}
    for layer in arch.target_layers:
        key = layer.kind if not layer.compress_ratio else f"{layer.kind}/c{layer.compress_ratio}"
        kinds[key] = kinds.get(key, 0) + 1
    fmt = weights_format or arch.weights_format
    return {
        "architecture": arch.architecture,
        "family": arch.family,
        "total_params": arch.params.total,
        "active_params": arch.active_params,
        "weights_format": fmt,
        "weights_bytes_total": arch.weight_bytes(fmt),
        "max_position_embeddings": arch.max_position_embeddings,
        "layers": kinds,
        "mtp_layers": arch.num_mtp_layers,
        "notes": list(arch.notes),
    }


def _engine_summary(
    s: EngineSettings, max_model_len: int, block_size: int | None = None
) -> dict[str, Any]:
    return {
        "device": s.device,
        "tensor_parallel_size": s.tensor_parallel_size,
        "pipeline_parallel_size": s.pipeline_parallel_size,
        "data_parallel_size": s.data_parallel_size,
        "enable_expert_parallel": s.enable_expert_parallel,
        "kv_cache_dtype": s.kv_cache_dtype,
        "block_size": block_size or s.block_size,
        "max_model_len": max_model_len,
        "max_num_batched_tokens": s.max_num_batched_tokens,
        "max_num_scheduled_tokens": s.max_num_scheduled_tokens,
        "max_num_seqs": s.max_num_seqs,
        "gpu_memory_utilization": s.gpu_memory_utilization,
        "kv_cache_memory": s.kv_cache_memory,
        "speculative": (
            {
                "method": s.speculative.method,
                "num_speculative_tokens": s.speculative.num_speculative_tokens,
            }
            if s.speculative
            else None
        ),
        "draft_layers_cached": s.num_draft_layers,
        "enable_chunked_prefill": s.enable_chunked_prefill,
        "enable_prefix_caching": s.enable_prefix_caching,
        "async_scheduling": s.async_scheduling,
        "enforce_eager": s.enforce_eager,
        "vllm_version": s.vllm_version,
    }
