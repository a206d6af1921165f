"""The recurrent state a hybrid model's linear-attention / Mamba layers keep per request,
as vLLM 0.32 sizes it, and how vLLM fits those state pages beside attention pages.

Each function names the vLLM code it mirrors:
vllm/model_executor/layers/mamba/mamba_utils.py (MambaStateShapeCalculator,
MambaStateDtypeCalculator), vllm/v1/kv_cache_interface.py (MambaSpec),
vllm/model_executor/models/config.py (MambaModelConfig, NemotronHForCausalLMConfig,
Qwen3_5ForConditionalGenerationConfig), vllm/platforms/interface.py
(Platform._align_hybrid_block_size) and vllm/platforms/cpu.py. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Literal

from deskside.errors import UsageError
from deskside.planner.kv import KVSpec, cdiv
from deskside.planner.types import RecurrentState

# torch dtype sizes of the state dtypes vLLM accepts (STR_DTYPE_TO_TORCH_DTYPE)
STATE_DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "float": 4,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
}

# The smallest kernel block of the attention backend beside the state layers
# (get_supported_kernel_block_sizes): CPU_ATTN takes multiples of 32; FlashAttention,
# FlashInfer and Triton attention multiples of 16.
KERNEL_BLOCK = {"cpu": 32, "gpu": 16}

CacheMode = Literal["align", "none"]


def divide(key: str, value: int, tp: int) -> int:
    """vllm.distributed.divide: a state dimension split evenly over the TP ranks."""
    if value % tp:
        raise UsageError(
            f"the model's {key} ({value}) is not divisible by the tensor parallel size ({tp})",
            hint="choose a tensor parallel size that divides it",
        )
    return value // tp


def extra_groups_for_head_shards(ngroups: int, tp: int) -> int:
    """MambaStateShapeCalculator.extra_groups_for_head_shards: groups replicated so that
    every head shard has its group."""
    if ngroups % tp == 0:
        return 0
    return tp - ngroups


def state_shapes(state: RecurrentState, tp: int, num_spec: int) -> tuple[tuple[int, ...], ...]:
    """(conv state, temporal state) shapes of one layer on one TP rank (SD conv layout;
    the DS layout swaps the conv axes, same size)."""
    if state.kind == "gdn":
        # MambaStateShapeCalculator.gated_delta_net_state_shape
        conv_dim = state.head_k_dim * state.num_k_heads * 2 + state.head_v_dim * state.num_v_heads
        conv = (state.conv_kernel - 1 + num_spec, divide("linear conv dim", conv_dim, tp))
        temporal = (
            divide("linear_num_value_heads", state.num_v_heads, tp),
            state.head_v_dim,
            state.head_k_dim,
        )
        return conv, temporal
    # MambaStateShapeCalculator.mamba2_state_shape (intermediate = heads x head_dim, as
    # NemotronHForCausalLM.get_mamba_state_shape_from_config passes it)
    intermediate = state.num_v_heads * state.head_v_dim
    groups = state.num_k_heads + extra_groups_for_head_shards(state.num_k_heads, tp)
    conv_dim = intermediate + 2 * groups * state.head_k_dim
    conv = (state.conv_kernel - 1 + num_spec, divide("mamba conv dim", conv_dim, tp))
    temporal = (
        divide("mamba_num_heads", state.num_v_heads, tp),
        state.head_v_dim,
        state.head_k_dim,
    )
    return conv, temporal


def ssm_cache_dtype(state: RecurrentState, device: str) -> str:
    """The resolved mamba_ssm_cache_dtype. The model's config hook fills "auto"
    (NemotronHForCausalLMConfig: the config's mamba_ssm_cache_dtype, float32 by default;
    Qwen3_5ForConditionalGenerationConfig: the config's mamba_ssm_dtype); then on CPU
    (CpuPlatform.check_and_update_config, a CPU with AVX-512 BF16) anything but float16 /
    bfloat16 becomes float32."""
    dtype = state.ssm_cache_dtype
    if device == "cpu" and dtype not in ("float16", "bfloat16"):
        return "float32"
    return dtype


def state_dtypes(state: RecurrentState, model_dtype: str, device: str) -> tuple[str, str]:
    """MambaStateDtypeCalculator._mamba_state_dtype: the conv state in the model dtype
    (mamba_cache_dtype "auto"), the temporal state in mamba_ssm_cache_dtype ("auto": the
    conv state's dtype)."""
    conv = model_dtype
    ssm = ssm_cache_dtype(state, device)
    return conv, conv if ssm == "auto" else ssm


def state_page_bytes(shapes: tuple[tuple[int, ...], ...], dtypes: tuple[str, ...]) -> int:
    """MambaSpec.page_size_bytes before padding: every state's elements x dtype size."""
    return sum(
        prod(shape) * STATE_DTYPE_BYTES[dtype] for shape, dtype in zip(shapes, dtypes, strict=True)
    )


def cache_mode(enable_prefix_caching: bool) -> CacheMode:
    """MambaModelConfig.verify_and_update_config: prefix caching (on by default for
    hybrid models, ModelConfig.is_prefix_caching_supported) sets mamba_cache_mode
    "align"; without it the mode is "none"."""
    return "align" if enable_prefix_caching else "none"


def state_pages(mode: CacheMode, num_spec: int, checkpoint_blocks: int) -> int:
    """MambaSpec.max_memory_usage_bytes / page_size_bytes: 2 + speculative + prefill
    checkpoint pages in "align" mode, 1 + speculative otherwise."""
    if mode == "align":
        return 2 + num_spec + checkpoint_blocks
    return 1 + num_spec


def aligned_block_size(
    block_size: int, attn_page_one_token: int, mamba_page: int, device: str
) -> int:
    """Platform._align_hybrid_block_size: the smallest attention block size, a multiple of
    the kernel alignment (the backend's smallest kernel block, at least the configured
    block size), whose page holds one Mamba page; never below the configured size."""
    kernel = KERNEL_BLOCK[device]
    alignment = max(kernel, block_size)
    attn_block = alignment * cdiv(mamba_page, alignment * attn_page_one_token)
    attn_block = kernel * cdiv(attn_block, kernel)  # lcm of the backends' smallest blocks
    return max(block_size, attn_block)


@dataclass(frozen=True)
class HybridLayout:
    """What vLLM settles for a hybrid model on one rank: the attention block size, the
    Mamba page before and after padding, and the pages one request holds per layer."""

    block_size: int
    mamba_block_size: int
    state_page_bytes: int  # MambaSpec.page_size_bytes before padding
    page_size_bytes: int  # the attention page = the padded Mamba page
    state_pages: int
    mode: CacheMode
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, str]

    def mamba_spec(self) -> KVSpec:
        """MambaBase.get_kv_cache_spec: a MambaSpec of mamba_block_size tokens whose page
        is padded to the attention page (mamba_page_size_padded)."""
        shapes = "+".join("x".join(map(str, s)) for s in self.shapes)
        return KVSpec(
            type="mamba",
            block_size=self.mamba_block_size,
            page_size_bytes=self.page_size_bytes,
            state_pages=self.state_pages,
            variant=f"{shapes}:{'/'.join(self.dtypes)}:{self.mode}",
        )


def hybrid_layout(
    state: RecurrentState,
    *,
    model_dtype: str,
    device: str,
    tp: int,
    num_spec: int,
    block_size: int,
    attn_page_one_token: int,
    prefix_caching: bool,
    max_model_len: int,
    checkpoint_blocks: int,
) -> HybridLayout:
    """The block size, Mamba page and state pages vLLM settles for (see above)."""
    shapes = state_shapes(state, tp, num_spec)
    dtypes = state_dtypes(state, model_dtype, device)
    page = state_page_bytes(shapes, dtypes)
    block = (
        aligned_block_size(block_size, attn_page_one_token, page, device)
        if attn_page_one_token
        else block_size
    )
    mode = cache_mode(prefix_caching)
    return HybridLayout(
        block_size=block,
        # "align": the attention block size; "none": max_model_len (one block per request)
        mamba_block_size=block if mode == "align" else max_model_len,
        state_page_bytes=page,
        page_size_bytes=block * attn_page_one_token or page,
        state_pages=state_pages(mode, num_spec, checkpoint_blocks),
        mode=mode,
        shapes=shapes,
        dtypes=dtypes,
    )
