"""DeepSeek-V4: its config, its many caches per layer, and its non-KV memory.

A V4 layer keeps a sliding-window cache (window `sliding_window`) and, when its
compress ratio is 4 or 128, a compressed MLA cache, a compressor state ring and (ratio 4) a
sparse-indexer key cache with its own compressor state. Draft layers (MTP/DSpark) keep only a
sliding-window cache. Every cache has one KV head and is replicated whole on every TP rank.

Two engines are modelled, chosen by the recipe's vLLM version:
- vLLM >= 0.26 (checked against 0.32.0): specs of DeepseekV4Attention / DeepseekV4SWACache /
  CompressorStateCache / DeepseekV4IndexerCache, packed groups
  (_get_packed_kv_cache_groups), generic accounting (deskside.planner.kv).
- the seed article's engine (vLLM 0.25.2 + the Anemll DSpark overlay): SWA and state pages
  padded up to the next MLA page size, and a "needed" memory of T x S x pages
  (_max_memory_usage_bytes_from_groups, DSv4 branch), no null-block reservation.
The derivation, with sources, is in docs/research/deepseek-v4-kv-cache.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from deskside.errors import ModelConfigError, UsageError
from deskside.planner.arch import AttentionLayer, ModelArch, MoEShape, ParamCounts, _common, _int
from deskside.planner.engine_config import EngineSettings, version_tuple
from deskside.planner.kv import (
    Accounting,
    KVGroup,
    KVSpec,
    approximate_gcd,
    cdiv,
    generic_accounting,
)
from deskside.planner.overhead import NonKVEstimate

SWA_BLOCK = 64  # DeepseekV4SWACache: fixed block size
STATE_BLOCK = {4: 4, 128: 8}  # CompressorStateCache: block (= ring) size per ratio
STATE_WINDOW = {4: 8, 128: 128}  # CompressorStateCache: sliding window per ratio
RECORD = 584  # fp8_ds_mla record per cached state: 448 fp8 NoPE + 64 bf16 RoPE + 8 scales
INDEX_RECORD_EXTRA = 4  # fp32 scale per 128-dim indexer key
DEFAULT_DSPARK_LAYERS = 3  # DSparkDeepseekV4Model: n_mtp_layers or 3


def round_up(x: int, m: int) -> int:
    return cdiv(x, m) * m


def read_deepseek_v4(cfg: Mapping[str, Any]) -> ModelArch:
    c = _common(cfg)
    hidden, n_layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    head_dim = _int(cfg, "head_dim")
    window = _int(cfg, "sliding_window")
    ratios_raw = cfg.get("compress_ratios")
    if not isinstance(ratios_raw, list) or len(ratios_raw) < n_layers:
        raise ModelConfigError(
            "DeepSeek-V4 config needs compress_ratios for every layer",
            hint=f"expected a list of at least num_hidden_layers ({n_layers}) entries",
        )
    ratios = [int(r) for r in ratios_raw[:n_layers]]
    index_head_dim = _int(cfg, "index_head_dim")
    index_heads = _int(cfg, "index_n_heads")
    q_lora = _int(cfg, "q_lora_rank")
    o_lora = _int(cfg, "o_lora_rank")
    o_groups = int(cfg.get("o_groups") or 8)
    n_mtp = int(cfg.get("num_nextn_predict_layers") or 0)
    n_dspark = int(cfg.get("n_mtp_layers") or DEFAULT_DSPARK_LAYERS)

    layers = tuple(
        AttentionLayer(
            index=i,
            kind="v4",
            num_kv_heads=1,
            head_size=head_dim,
            head_size_v=0,
            sliding_window=window,
            compress_ratio=max(ratio, 0),
            index_head_dim=index_head_dim if ratio == 4 else None,
        )
        for i, ratio in enumerate(ratios)
    )
    # Draft layers: as many as the larger drafter (DSpark's n_mtp_layers or 3, MTP's
    # num_nextn_predict_layers); the spec builder keeps as many as the method uses.
    drafts = tuple(
        AttentionLayer(
            index=n_layers + j,
            kind="v4",
            num_kv_heads=1,
            head_size=head_dim,
            head_size_v=0,
            sliding_window=window,
            is_draft=True,
        )
        for j in range(max(n_mtp, n_dspark))
    )

    # Parameters (DeepseekV4Attention / DeepseekV4MoE shapes).
    attn_one = (
        hidden * q_lora  # wq_a
        + q_lora * heads * head_dim  # wq_b
        + hidden * head_dim  # wkv (one latent head)
        + (heads * head_dim // o_groups) * o_groups * o_lora  # wo_a (grouped)
        + o_groups * o_lora * hidden  # wo_b
        + heads  # attention sinks
    )
    compressor = {4: 2 * 2 * hidden * head_dim, 128: 2 * hidden * head_dim, 0: 0}
    indexer = (
        q_lora * index_heads * index_head_dim
        + hidden * index_heads
        + 2 * 2 * hidden * index_head_dim
    )
    attention = sum(attn_one + compressor.get(r, 0) + (indexer if r == 4 else 0) for r in ratios)
    n_experts = _int(cfg, "n_routed_experts")
    n_shared = int(cfg.get("n_shared_experts") or 0)
    topk = _int(cfg, "num_experts_per_tok")
    e_inter = _int(cfg, "moe_intermediate_size")
    expert_one = 3 * hidden * e_inter
    hc = int(cfg.get("hc_mult") or 1)
    embed = c["vocab_size"] * hidden
    draft_dense = attn_one + n_shared * expert_one + hidden * n_experts
    draft_dense += 2 * hidden * hidden + 4 * hidden
    params = ParamCounts(
        embedding=embed,
        lm_head=0 if cfg.get("tie_word_embeddings") else embed,
        attention=attention,
        dense_mlp=0,
        experts=n_layers * n_experts * expert_one,
        shared_experts=n_layers * n_shared * expert_one,
        router=n_layers * hidden * n_experts,
        norms=n_layers * (2 * hidden + q_lora + head_dim) * hc,
        draft_layer=draft_dense,
        draft_layer_experts=n_experts * expert_one,
    )
    active = params.total - params.experts + n_layers * topk * expert_one
    expert_dtype = str(cfg.get("expert_dtype", "fp4")).lower()
    fmt = "fp8+mxfp4" if expert_dtype in ("fp4", "mxfp4") else "fp8"
    if not isinstance(cfg.get("quantization_config"), Mapping):
        fmt = "bf16"
    return ModelArch(
        family="deepseek_v4",
        layers=layers + drafts,
        params=params,
        active_params=active,
        weights_format=fmt,
        moe=MoEShape(n_experts, n_shared, topk, e_inter, n_layers),
        num_mtp_layers=n_mtp,
        use_mla=True,
        notes=(
            f"{sum(r == 0 for r in ratios)} window-only layers, {sum(r == 4 for r in ratios)} "
            f"ratio-4 layers with a sparse indexer, {sum(r == 128 for r in ratios)} ratio-128 "
            f"layers; sliding window {window} on every layer",
        ),
        **c,
    )


def num_draft_layers(arch: ModelArch, s: EngineSettings) -> int:
    """Draft layers the speculative method builds (each caches a sliding window)."""
    if s.speculative is None:
        return 0
    if s.speculative.method == "dspark":
        return len(arch.draft_layers)
    if s.speculative.method == "mtp":
        return arch.num_mtp_layers
    return 0


def is_seed_engine(s: EngineSettings) -> bool:
    """The seed's engine: vLLM 0.25.x with the Anemll DSpark overlay."""
    return version_tuple(s.vllm_version) < (0, 26)


@dataclass(frozen=True)
class V4Pages:
    """Page bytes per cache kind for one KV dtype and engine."""

    c4: int
    c128: int
    indexer: int
    swa: int
    c4_state: int
    indexer_state: int
    c128_state: int


COFF = {4: 2, 128: 1}  # Compressor: ratio 4 overlaps two windows (two rows per state)


def _state_page(ratio: int, dim: int) -> int:
    """CompressorStateCache: a ring of STATE_BLOCK[ratio] fp32 (kv, score) rows."""
    return STATE_BLOCK[ratio] * 2 * COFF[ratio] * dim * 4


def v4_pages(arch: ModelArch, s: EngineSettings) -> V4Pages:
    """Page sizes (bytes per block) of each V4 cache.

    vLLM 0.32 (DeepseekV4Attention / DeepseekV4SWACache / CompressorStateCache /
    DeepseekV4IndexerCache .get_kv_cache_spec): 584-byte fp8_ds_mla records, pages padded to
    576 bytes (indexer and states too with fp8_ds_mla, 512 otherwise); nvfp4_ds_mla is
    refused for V4. Seed engine: nvfp4_ds_mla keeps the 584-byte record aligned to 584, the
    indexer aligns to 512, and every sliding/state page is padded up to the next larger MLA
    page (group_and_unify_kv_cache_specs in the overlay)."""
    seed = is_seed_engine(s)
    dtype = s.kv_cache_dtype
    if dtype in ("auto", "bfloat16", "fp8", "fp8_e4m3"):
        dtype = "fp8_ds_mla"  # _resolve_dsv4_kv_cache_dtype: the ds_mla layout on GB10/Hopper
    if dtype == "nvfp4_ds_mla" and not seed:
        raise UsageError(
            "vLLM >= 0.26 refuses kv_cache_dtype nvfp4_ds_mla for DeepSeek-V4 "
            '("DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache")',
            hint="use kv_cache_dtype fp8_ds_mla (V4's 584-byte record), or pin the seed's "
            "0.25 DSpark image, where nvfp4_ds_mla is accepted (and stores the same 584 bytes)",
        )
    if dtype not in ("fp8_ds_mla", "nvfp4_ds_mla"):
        raise UsageError(f"kv_cache_dtype {s.kv_cache_dtype} is not supported for DeepSeek-V4")
    head = arch.layers[0].head_size
    index_dim = next((la.index_head_dim for la in arch.layers if la.index_head_dim), 128)
    index_record = index_dim + index_dim // 128 * INDEX_RECORD_EXTRA
    c4_states, c128_states = s.block_size // 4, s.block_size // 128
    mla_align = 584 if dtype == "nvfp4_ds_mla" else 576
    aux_align = 576 if dtype == "fp8_ds_mla" else 512
    c4 = round_up(c4_states * RECORD, mla_align)
    c128 = round_up(c128_states * RECORD, mla_align)
    indexer = round_up(c4_states * index_record, aux_align)
    swa = round_up(SWA_BLOCK * RECORD, mla_align)
    states = (_state_page(4, head), _state_page(4, index_dim), _state_page(128, head))
    if seed:
        mla_pages = sorted({c4, c128, indexer})

        def up(page: int) -> int:
            return next((p for p in mla_pages if p >= page), page)

        swa = up(swa)
        c4_state, idx_state, c128_state = (up(p) for p in states)
    else:
        c4_state, idx_state, c128_state = (round_up(p, aux_align) for p in states)
    return V4Pages(c4, c128, indexer, swa, c4_state, idx_state, c128_state)


def seed_accounting(specs: dict[str, KVSpec], s: EngineSettings) -> Accounting:
    """The seed engine's KV accounting (Anemll overlay on vLLM 0.25,
    kv_cache_utils._get_kv_cache_groups_uniform_groups and the DSv4 branch of
    _max_memory_usage_bytes_from_groups):

    - all MLA caches form one group; sliding caches are bucketed by (block, window);
    - T = approximate_gcd of the per-page layer counts, at least the MLA group's largest
      count; a sliding bucket longer than T splits into cdiv(count, T) groups;
    - a request is charged T x S bytes per block, S = the MLA group's distinct pages summed;
    - the real block stride is, per distinct page, page x its largest count in one group,
      rounded to 64 bytes; sliding reservations count one batch in flight, no null block."""
    mla = {n: sp for n, sp in specs.items() if sp.type == "mla"}
    sliding: dict[tuple[int, int | None], dict[str, KVSpec]] = {}
    for name, sp in specs.items():
        if sp.type != "mla":
            sliding.setdefault((sp.block_size, sp.sliding_window), {})[name] = replace(
                sp, extra_retained_tokens=0
            )

    def counts(bucket: dict[str, KVSpec]) -> Counter[int]:
        return Counter(sp.page_size_bytes for sp in bucket.values())

    mla_max = max(counts(mla).values())
    all_counts = [max(counts(b).values()) for b in (mla, *sliding.values())]
    tuples = approximate_gcd(all_counts, mla_max)
    groups = [KVGroup(tuple(mla), tuple(mla.values()), uniform_type=True)]
    for bucket in sliding.values():
        # split by pattern repeats: cdiv(largest per-page count, T) groups
        by_page: dict[int, list[str]] = {}
        for name, sp in bucket.items():
            by_page.setdefault(sp.page_size_bytes, []).append(name)
        n = cdiv(max(len(v) for v in by_page.values()), tuples)
        for i in range(n):
            part = tuple(name for names in by_page.values() for name in names[i::n])
            groups.append(KVGroup(part, tuple(bucket[x] for x in part), uniform_type=True))
    largest: dict[int, int] = {}
    for g in groups:
        for page, count in Counter(sp.page_size_bytes for sp in g.specs).items():
            largest[page] = max(largest.get(page, 0), count)
    t = max(largest.values())
    s_bytes = sum(set(counts(mla)))
    stride = round_up(sum(page * count for page, count in largest.items()), 64)
    return Accounting(
        groups=tuple(groups),
        bytes_per_block=stride,
        charge_per_block=t * s_bytes,
        reserve_null_block=False,
        in_flight_tokens=s.max_num_batched_tokens,
    )


def v4_accounting(specs: dict[str, KVSpec], s: EngineSettings) -> Accounting:
    if is_seed_engine(s):
        return seed_accounting(specs, s)
    return generic_accounting(specs, block_outermost=True)


def v4_layer_specs(arch: ModelArch, s: EngineSettings) -> dict[str, KVSpec]:
    """Every V4 cache of one rank, in registration order (DeepseekV4Attention.__init__:
    indexer key cache, indexer compressor state, sliding window, compressed KV, compressor
    state), then the draft layers' sliding windows."""
    pages = v4_pages(arch, s)
    block = s.block_size
    extra = max(0, s.num_prefill_lookahead_tokens - 1)
    dtype = "v4"
    specs: dict[str, KVSpec] = {}
    drafts = num_draft_layers(arch, s)

    def swa() -> KVSpec:
        return KVSpec(
            type="sliding_mla",
            block_size=SWA_BLOCK,
            page_size_bytes=pages.swa,
            sliding_window=arch.layers[0].sliding_window,
            extra_retained_tokens=extra,
            variant=dtype,
        )

    def state(ratio: int, page: int, role: str) -> KVSpec:
        return KVSpec(
            type="sliding_mla",
            block_size=STATE_BLOCK[ratio],
            page_size_bytes=page,
            sliding_window=STATE_WINDOW[ratio],
            extra_retained_tokens=extra,
            variant=f"{dtype}-state-{role}",
        )

    seen_drafts = 0
    for layer in arch.layers:
        p = f"model.layers.{layer.index}.attn"
        if layer.is_draft:
            if seen_drafts >= drafts:
                continue
            seen_drafts += 1
            specs[f"{p}.swa_cache"] = swa()
            continue
        ratio = layer.compress_ratio
        if ratio == 4:
            specs[f"{p}.indexer.k_cache"] = KVSpec(
                type="mla", block_size=block, page_size_bytes=pages.indexer, variant="indexer"
            )
            specs[f"{p}.indexer.compressor.state_cache"] = state(4, pages.indexer_state, "idx")
        specs[f"{p}.swa_cache"] = swa()
        if ratio in (4, 128):
            specs[f"{p}.compressed"] = KVSpec(
                type="mla",
                block_size=block,
                page_size_bytes=pages.c4 if ratio == 4 else pages.c128,
                variant=f"{dtype}-c{ratio}",
            )
            specs[f"{p}.compressor.state_cache"] = state(
                ratio, pages.c4_state if ratio == 4 else pages.c128_state, f"c{ratio}"
            )
    return specs


GIB = 1024**3
MIB = 1024**2

# The seed's published run (vLLM 0.25 DSpark image, GB10, TP=2, DSpark with 3 draft layers,
# gpu_memory_utilization 0.82, max_num_batched_tokens 16,384): the engine reported 9.23 GiB
# available for the KV cache at max_model_len 1,048,576. Everything else vLLM's profiling
# counted is weights + non-KV memory; the indexer workspace is known per max_model_len, the
# rest is calibrated here. deskside's weight estimate from config.json (77.5 GiB per rank)
# is 3.8 GiB under the 81.3 GiB field measurement; that unexplained part is folded in too.
SEED_RUN = {
    "total": int(121.6 * 1024**3),
    "utilization": 0.82,
    "available_kv": int(9.23 * 1024**3),
    "max_model_len": 1_048_576,
    "max_num_batched_tokens": 16_384,
    "tp": 2,
    "draft_layers": 3,
}
FIXED_NON_KV = 1024**3  # NCCL, CUDA context, host RSS (UMA), indexer logits, FlashInfer


def indexer_workspace_bytes(max_model_len: int, seed: bool) -> int:
    """The sparse indexer's prefill K-gather workspace, sized by max_model_len and
    counted in the profiling run: T entries of 128 fp8 + 4 scale bytes (+1 MiB), with
    T = 10 L in the seed engine (get_max_prefill_buffer_size = 40 L / 4) and in vLLM 0.32
    T = L x 8 x f // 4, f = 5 up to 262,144 tokens and 2 above
    (indexer.get_max_prefill_buffer_size, sparse_mla_prefill_workspace_factor)."""
    if seed:
        entries = 10 * max_model_len
    else:
        factor = 5 if max_model_len <= 262_144 else 2
        entries = max_model_len * 8 * factor // 4
    return entries * 132 + MIB


def calibrated_rest(arch: ModelArch) -> int:
    """Non-KV memory of the seed's run that is neither weights nor the indexer workspace."""
    c = SEED_RUN
    requested = -(-int(c["total"] * c["utilization"] * 1000) // 1000)
    weights = arch.weight_bytes_per_rank(int(c["tp"]), draft_layers=int(c["draft_layers"]))
    workspace = indexer_workspace_bytes(int(c["max_model_len"]), seed=True)
    return requested - weights - int(c["available_kv"]) - workspace


def v4_non_kv(arch: ModelArch, s: EngineSettings, max_model_len: int) -> NonKVEstimate:
    """Non-KV memory of a V4 rank on GPU: the indexer workspace (grows with
    max_model_len), and activations/workspaces that grow with max_num_batched_tokens,
    calibrated on the seed's published run; plus, outside vLLM's budget, the metadata
    buffers vLLM >= 0.26 allocates after profiling (they grow with max_model_len x
    max_num_batched_tokens and eat unified-memory headroom)."""
    seed = is_seed_engine(s)
    rest = calibrated_rest(arch)
    per_token = (rest - FIXED_NON_KV) / int(SEED_RUN["max_num_batched_tokens"])
    parts = {
        "indexer_workspace": indexer_workspace_bytes(max_model_len, seed),
        "activations_and_workspaces": int(per_token * s.max_num_batched_tokens),
        "fixed": int(FIXED_NON_KV),
    }
    sources = [
        "DeepSeek-V4 non-KV memory: the indexer prefill workspace "
        f"({parts['indexer_workspace'] / GIB:.2f} GiB at max_model_len {max_model_len:,}) "
        "plus activations/workspaces calibrated on the seed's published run (0.82 x 121.6 GiB "
        "budget - 9.23 GiB KV at 1,048,576 tokens - weights - that workspace), scaled by "
        "max_num_batched_tokens",
    ]
    after = 0
    if not seed:
        mnbt = s.max_num_batched_tokens
        after = 2 * mnbt * round_up(cdiv(max_model_len, 128), 128) * 4
        after += mnbt * cdiv(max_model_len, 256) * 4
        sources.append(
            f"vLLM >= 0.26 also allocates {after / GIB:.2f} GiB of sparse-attention metadata "
            "after profiling, outside gpu_memory_utilization (counted against headroom)"
        )
    return NonKVEstimate(parts=parts, sources=tuple(sources), outside_budget=after)
