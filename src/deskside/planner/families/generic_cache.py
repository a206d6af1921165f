"""Per-layer KV cache specs of one tensor-parallel rank of a generic Hugging Face model,
as vLLM's attention layers register them (their `get_kv_cache_spec`). Pure."""

from __future__ import annotations

from deskside.planner.engine_config import DS_MLA_STATE_BYTES
from deskside.planner.kv import KVSpec
from deskside.planner.types import AttentionLayer, EngineSettings, ModelArch


def kv_heads_per_rank(num_kv_heads: int, tp: int) -> int:
    """Attention heads are split across TP ranks; with more ranks than KV heads each rank
    keeps a replica of one (e.g. LlamaAttention.__init__: max(1, total_kv_heads // tp))."""
    return max(1, num_kv_heads // tp)


def gqa_spec(layer: AttentionLayer, s: EngineSettings) -> KVSpec:
    """Attention.get_kv_cache_spec: FullAttentionSpec or SlidingWindowSpec; the page is
    block_size x heads x (K + V head sizes) x dtype bytes (AttentionSpec.page_size_bytes).
    A sliding layer takes the primary block size when its backend runs it
    (_largest_kernel_block_within; CPU_ATTN and FlashAttention accept multiples of 16/32)."""
    heads = kv_heads_per_rank(layer.num_kv_heads, s.tensor_parallel_size)
    per_token = heads * (layer.head_size + layer.head_size_v) * s.kv_dtype_bytes
    if layer.kind == "sliding" and layer.sliding_window:
        return KVSpec(
            type="sliding",
            block_size=s.block_size,
            page_size_bytes=s.block_size * per_token,
            sliding_window=layer.sliding_window,
            extra_retained_tokens=max(0, s.num_prefill_lookahead_tokens - 1),
        )
    if layer.kind == "chunked" and layer.attention_chunk_size:
        # ChunkedLocalAttention.get_kv_cache_spec: the primary block size
        return KVSpec(
            type="chunked",
            block_size=s.block_size,
            page_size_bytes=s.block_size * per_token,
            attention_chunk_size=layer.attention_chunk_size,
        )
    return KVSpec(type="full", block_size=s.block_size, page_size_bytes=s.block_size * per_token)


def mla_spec(layer: AttentionLayer, s: EngineSettings) -> KVSpec:
    """MLAAttention.get_kv_cache_spec: one latent (kv_lora_rank + qk_rope_head_dim) per
    token, num_kv_heads=1 and max_tp_shards=1 (every TP rank holds all of it); ds_mla
    dtypes store a fixed 656 / 352 bytes per token."""
    per_token = DS_MLA_STATE_BYTES.get(s.kv_cache_dtype, layer.head_size * s.kv_dtype_bytes)
    return KVSpec(
        type="mla",
        block_size=s.block_size,
        page_size_bytes=s.block_size * per_token,
        variant=s.kv_cache_dtype,
    )


def indexer_spec(layer: AttentionLayer, s: EngineSettings) -> KVSpec:
    """DeepseekV32IndexerCache.get_kv_cache_spec: fp8 keys plus one fp32 scale per 128
    (index_head_dim + index_head_dim // 128 * 4 bytes per token), replicated."""
    assert layer.index_head_dim is not None
    per_token = layer.index_head_dim + layer.index_head_dim // 128 * 4
    return KVSpec(
        type="mla",
        block_size=s.block_size,
        page_size_bytes=s.block_size * per_token,
        variant="indexer",
    )


def generic_layer_specs(arch: ModelArch, s: EngineSettings) -> dict[str, KVSpec]:
    """The KV cache spec of every cached layer on one rank, in registration order: target
    layers, then the MTP draft layers that speculative decoding uses."""
    specs: dict[str, KVSpec] = {}
    drafts = 0
    for layer in arch.layers:
        if layer.is_draft:
            if drafts >= s.num_draft_layers:
                continue
            drafts += 1
        prefix = f"model.layers.{layer.index}"
        if layer.kind == "mla":
            specs[f"{prefix}.self_attn.attn"] = mla_spec(layer, s)
            if layer.index_head_dim:
                specs[f"{prefix}.self_attn.indexer.k_cache"] = indexer_spec(layer, s)
        else:
            specs[f"{prefix}.self_attn.attn"] = gqa_spec(layer, s)
    if s.speculative is not None and s.speculative.method in EAGLE_METHODS:
        return full_allocation(specs)
    return specs


# SpeculativeConfig.use_eagle: with chunked local attention these turn the hybrid KV cache
# manager off (VllmConfig.__post_init__)
EAGLE_METHODS = ("eagle", "eagle3", "mtp", "dflash", "dspark")


def full_allocation(specs: dict[str, KVSpec]) -> dict[str, KVSpec]:
    """Without the hybrid KV cache manager (a chunked-attention model with an EAGLE-style
    drafter) vLLM allocates sliding and chunked layers as full attention
    (unify_hybrid_kv_cache_specs -> _promote_local_kv_cache_specs), when full layers are
    there too."""
    kinds = {sp.type for sp in specs.values()}
    if "chunked" not in kinds or "full" not in kinds:
        return specs
    return {
        name: KVSpec(type="full", block_size=sp.block_size, page_size_bytes=sp.page_size_bytes)
        if sp.type in ("sliding", "chunked")
        else sp
        for name, sp in specs.items()
    }
