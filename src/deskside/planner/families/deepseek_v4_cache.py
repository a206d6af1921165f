"""DeepSeek-V4's caches and their accounting, for two engines.

A V4 layer keeps a sliding-window cache (window `sliding_window`) and, when its compress
ratio is 4 or 128, a compressed MLA cache, a compressor state ring and (ratio 4) a
sparse-indexer key cache with its own compressor state. Draft layers (MTP/DSpark) keep only
a sliding-window cache. Every cache has one KV head and is replicated whole on every TP
rank.

The engine is chosen by the recipe's vLLM version:
- vLLM >= 0.26 (checked against 0.32.0): specs of DeepseekV4Attention / DeepseekV4SWACache /
  CompressorStateCache / DeepseekV4IndexerCache, packed groups
  (_get_packed_kv_cache_groups), generic accounting (deskside.planner.kv).
- the DSpark overlay engine (Anemll's DSpark overlay on vLLM 0.25.2): SWA and state pages
  padded up to the next MLA page size, and a "needed" memory of T x S x pages
  (_max_memory_usage_bytes_from_groups, DSv4 branch), no null-block reservation.
The derivation, with sources, is in docs/research/deepseek-v4-kv-cache.md.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from deskside.errors import UsageError
from deskside.planner.engine_config import is_dspark_overlay_engine
from deskside.planner.kv import (
    Accounting,
    KVGroup,
    KVSpec,
    Limits,
    approximate_gcd,
    cdiv,
    generic_accounting,
    round_up,
)
from deskside.planner.types import EngineSettings, ModelArch

SWA_BLOCK = 64  # DeepseekV4SWACache: fixed block size
STATE_BLOCK = {4: 4, 128: 8}  # CompressorStateCache: block (= ring) size per ratio
STATE_WINDOW = {4: 8, 128: 128}  # CompressorStateCache: sliding window per ratio
RECORD = 584  # fp8_ds_mla record per cached state: 448 fp8 NoPE + 64 bf16 RoPE + 8 scales
INDEX_RECORD_EXTRA = 4  # fp32 scale per 128-dim indexer key
COFF = {4: 2, 128: 1}  # Compressor: ratio 4 overlaps two windows (two rows per state)


def num_draft_layers(arch: ModelArch, s: EngineSettings) -> int:
    """Draft layers the speculative method builds (each caches a sliding window)."""
    if s.speculative is None:
        return 0
    if s.speculative.method == "dspark":
        return len(arch.draft_layers)
    if s.speculative.method == "mtp":
        return arch.num_mtp_layers
    return 0


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


def _state_page(ratio: int, dim: int) -> int:
    """CompressorStateCache: a ring of STATE_BLOCK[ratio] fp32 (kv, score) rows."""
    return STATE_BLOCK[ratio] * 2 * COFF[ratio] * dim * 4


def v4_pages(arch: ModelArch, s: EngineSettings) -> V4Pages:
    """Page sizes (bytes per block) of each V4 cache.

    vLLM 0.32 (DeepseekV4Attention / DeepseekV4SWACache / CompressorStateCache /
    DeepseekV4IndexerCache .get_kv_cache_spec): 584-byte fp8_ds_mla records, pages padded to
    576 bytes (indexer and states too with fp8_ds_mla, 512 otherwise); nvfp4_ds_mla is
    refused for V4. DSpark overlay engine: nvfp4_ds_mla keeps the 584-byte record aligned to
    584, the indexer aligns to 512, and every sliding/state page is padded up to the next
    larger MLA page (group_and_unify_kv_cache_specs in the overlay)."""
    overlay = is_dspark_overlay_engine(s.vllm_version)
    dtype = s.kv_cache_dtype
    if dtype in ("auto", "bfloat16", "fp8", "fp8_e4m3"):
        dtype = "fp8_ds_mla"  # _resolve_dsv4_kv_cache_dtype: the ds_mla layout on GB10/Hopper
    if dtype == "nvfp4_ds_mla" and not overlay:
        raise UsageError(
            "vLLM >= 0.26 refuses kv_cache_dtype nvfp4_ds_mla for DeepSeek-V4 "
            '("DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache")',
            hint="use kv_cache_dtype fp8_ds_mla (V4's 584-byte record), or run the DSpark "
            "overlay engine (vLLM 0.25.2), which accepts nvfp4_ds_mla (and stores the same "
            "584 bytes)",
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
    if overlay:
        mla_pages = sorted({c4, c128, indexer})

        def up(page: int) -> int:
            return next((p for p in mla_pages if p >= page), page)

        swa = up(swa)
        c4_state, idx_state, c128_state = (up(p) for p in states)
    else:
        c4_state, idx_state, c128_state = (round_up(p, aux_align) for p in states)
    return V4Pages(c4, c128, indexer, swa, c4_state, idx_state, c128_state)


@dataclass(frozen=True)
class OverlayAccounting(Accounting):
    """The DSpark overlay engine's accounting, whose capacity line counts a request's
    blocks differently from its admission check."""

    mla_page: int = 1  # the MLA group's page: its layers' pages summed

    def request_blocks_for_capacity(self, limits: Limits) -> int:
        """get_max_concurrency_for_kv_cache_config (overlay): every group's reservation in
        bytes (its pages x its own page, UniformTypeKVCacheSpecs.max_memory_usage_bytes),
        summed, then counted in MLA-group pages (kv_cache_groups[0].page_size_bytes),
        rounded up. The layer count it multiplies both by cancels out."""
        lim = self.effective_limits(limits)
        reserved = sum(g.blocks_per_request(lim) * g.page_size_bytes for g in self.groups)
        return cdiv(reserved, self.mla_page)


def dspark_overlay_accounting(specs: dict[str, KVSpec], s: EngineSettings) -> Accounting:
    """The DSpark overlay engine's KV accounting (Anemll's overlay on vLLM 0.25.2,
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
    return OverlayAccounting(
        groups=tuple(groups),
        bytes_per_block=stride,
        charge_per_block=t * s_bytes,
        reserve_null_block=False,
        in_flight_tokens=s.max_num_batched_tokens,
        mla_page=groups[0].page_size_bytes,
    )


def v4_accounting(specs: dict[str, KVSpec], s: EngineSettings) -> Accounting:
    if is_dspark_overlay_engine(s.vllm_version):
        return dspark_overlay_accounting(specs, s)
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
