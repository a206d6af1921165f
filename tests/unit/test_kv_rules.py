"""vLLM's KV accounting rules on hand-computed examples (numbers worked out by hand in
the comments, not by the code under test)."""

from __future__ import annotations

from deskside.planner.kv import KVSpec, Limits, generic_accounting, kv_cache_groups

GIB = 1024**3


def full(page: int = 65536, bs: int = 128) -> KVSpec:
    return KVSpec(type="full", block_size=bs, page_size_bytes=page)


def sliding(window: int, page: int = 131072, bs: int = 128) -> KVSpec:
    return KVSpec(type="sliding", block_size=bs, page_size_bytes=page, sliding_window=window)


def test_uniform_model_one_group() -> None:
    # 4 layers x 2 KV heads x (64 + 64) x 2 B = 2,048 B/token; 128-token pages of 64 KiB.
    specs = {f"l{i}": full() for i in range(4)}
    acct = generic_accounting(specs)
    assert len(acct.groups) == 1
    limits = Limits(max_model_len=4096, max_in_flight_tokens=2048)
    cap = acct.capacity(limits, GIB)
    # 1 GiB / (4 x 64 KiB) = 4,096 blocks; 4,096 tokens need 32 blocks -> 128x.
    assert cap.num_blocks == 4096
    assert cap.blocks_per_request == 32
    assert cap.max_concurrency == 128.0
    assert cap.kv_cache_tokens == 524_288
    # One 4,096-token request: 32 blocks x 256 KiB = 8 MiB.
    assert acct.needed(limits) == 8 * 1024**2
    # the admission check holds back one block (the null block)
    assert acct.check_memory(GIB) == GIB - 4 * 65536


def test_hybrid_sliding_window_groups_and_capacity() -> None:
    # Gemma3-like: 3 sliding (window 512) + 1 full layer, equal 128 KiB pages.
    specs = {"l0": sliding(512), "l1": sliding(512), "l2": sliding(512), "l3": full(131072)}
    acct = generic_accounting(specs)
    # 3 sliding vs 1 full: 3 >= 1.5 x 1, so groups of one layer each -> 4 groups.
    assert sorted(len(g.layers) for g in acct.groups) == [1, 1, 1, 1]
    limits = Limits(max_model_len=4096, max_in_flight_tokens=2048)
    cap = acct.capacity(limits, GIB)
    # bytes/block = one page (128 KiB) -> 8,192 blocks.
    assert cap.num_blocks == 8192
    # full: 4096/128 = 32; sliding: cdiv(min(511 + 2048, 4096), 128) + 1 = 21, three times.
    assert cap.blocks_per_request == 32 + 3 * 21
    assert cap.kv_cache_tokens == int(8192 / 95 * 4096)


def test_group_size_uses_largest_bucket_when_close() -> None:
    # 12 sliding + 13 full (gpt-oss + eagle style): 13 < 1.5 x 12 -> groups of 13 layers.
    specs = {f"s{i}": sliding(128, page=65536) for i in range(12)}
    specs.update({f"f{i}": full() for i in range(13)})
    groups = kv_cache_groups(specs)
    assert sorted(len(g.layers) for g in groups) == [12, 13]


def test_estimate_max_model_len_binary_search() -> None:
    specs = {f"l{i}": full() for i in range(4)}
    acct = generic_accounting(specs)
    limits = Limits(max_model_len=1_000_000, max_in_flight_tokens=2048)
    # 1 GiB holds 4,096 blocks of 128 tokens: the longest request is 524,288 tokens.
    assert acct.estimate_max_model_len(limits, GIB) == 524_288
    assert acct.estimate_max_model_len(limits, 1000) == 0


def test_mixed_types_same_block_size_is_uniform_type() -> None:
    # MLA and an indexer cache (both full-attention types) with different pages share
    # one group whose page is the sum of both.
    mla = KVSpec(type="mla", block_size=64, page_size_bytes=64 * 656, variant="fp8_ds_mla")
    idx = KVSpec(type="mla", block_size=64, page_size_bytes=64 * 132, variant="indexer")
    groups = kv_cache_groups({"a": mla, "a.idx": idx})
    assert len(groups) == 1 and groups[0].uniform_type
    assert groups[0].page_size_bytes == 64 * (656 + 132)


def test_pipeline_stages_follow_get_pp_indices_and_share_the_smallest_pool() -> None:
    from deskside.hardware import PROFILES
    from deskside.planner.plan import PlanInput, plan, pp_partitions
    from deskside.planner.registry import read_arch
    from deskside.planner.types import EngineRequest

    # get_pp_indices: the remainder goes to the stages before the last
    assert pp_partitions(7, 2) == [4, 3]
    assert pp_partitions(10, 4) == [2, 3, 3, 2]
    arch = read_arch(
        {
            "model_type": "llama",
            "hidden_size": 256,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 64,
            "num_hidden_layers": 7,
            "vocab_size": 1000,
            "intermediate_size": 512,
            "max_position_embeddings": 32768,
        }
    )
    p = plan(
        PlanInput(
            arch,
            EngineRequest(
                device="cpu", pipeline_parallel_size=2, kv_cache_memory=GIB, max_model_len=4096
            ),
            PROFILES["cpu"],
        )
    )
    # 64 KiB pages; stage 0 holds 4 layers (256 KiB blocks -> 4,096 of them), stage 1
    # holds 3 (192 KiB -> 5,461): every rank gets 4,096; 32 blocks per 4,096-token request.
    assert [r.bytes_per_block for r in p.ranks] == [4 * 65536, 3 * 65536]
    assert p.num_blocks == 4096 and p.kv_cache_tokens == 4096 * 128
    assert [r.kv_bytes_per_token for r in p.ranks] == [4 * 512, 3 * 512]
