"""config.json -> ModelArch for the families deskside plans (hand-written configs)."""

from __future__ import annotations

import pytest

from deskside.errors import ModelConfigError
from deskside.planner.registry import read_arch

BASE = {
    "hidden_size": 1024,
    "num_attention_heads": 16,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "num_hidden_layers": 6,
    "intermediate_size": 4096,
}


def cfg(**kw: object) -> dict[str, object]:
    return {**BASE, **kw}


def kinds(c: dict[str, object]) -> list[str]:
    return [la.kind for la in read_arch(c).target_layers]


def test_llama_gqa() -> None:
    a = read_arch(
        cfg(model_type="llama", architectures=["LlamaForCausalLM"], num_key_value_heads=4)
    )
    assert kinds(cfg(model_type="llama")) == ["full"] * 6
    assert a.layers[0].num_kv_heads == 4 and a.layers[0].head_size == 64


def test_mistral_window_applies_to_every_layer() -> None:
    assert kinds(cfg(model_type="mistral", sliding_window=4096)) == ["sliding"] * 6


def test_qwen2_window_only_when_enabled() -> None:
    # (Qwen2Config's KV heads default to 32, more than these 16 heads: given here)
    off = cfg(model_type="qwen2", sliding_window=4096, num_key_value_heads=4)
    assert kinds(off) == ["full"] * 6
    on = cfg(
        model_type="qwen2",
        sliding_window=4096,
        use_sliding_window=True,
        max_window_layers=4,
        num_key_value_heads=4,
    )
    assert kinds(on) == ["full"] * 4 + ["sliding"] * 2


def test_gemma2_alternates_and_gemma3_is_five_to_one() -> None:
    assert kinds(cfg(model_type="gemma2", sliding_window=4096)) == ["sliding", "full"] * 3
    g3 = cfg(model_type="gemma3_text", sliding_window=1024, num_hidden_layers=12)
    assert kinds(g3) == (["sliding"] * 5 + ["full"]) * 2


def test_qwen3_head_dim_from_config() -> None:
    a = read_arch(cfg(model_type="qwen3", head_dim=128, num_key_value_heads=8))
    assert a.layers[0].head_size == 128


def test_deepseek_v3_mla_moe_mtp() -> None:
    a = read_arch(
        cfg(
            model_type="deepseek_v3",
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            qk_nope_head_dim=128,
            v_head_dim=128,
            q_lora_rank=1536,
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=512,
            n_shared_experts=1,
            first_k_dense_replace=1,
            num_nextn_predict_layers=1,
        )
    )
    assert a.use_mla and a.num_mtp_layers == 1
    assert [la.head_size for la in a.layers] == [576] * 7  # 512 + 64, one latent head
    assert a.draft_layers[0].is_draft
    assert a.moe is not None and a.moe.num_moe_layers == 5


def test_deepseek_v32_indexer() -> None:
    a = read_arch(
        cfg(
            model_type="deepseek_v32",
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            qk_nope_head_dim=128,
            v_head_dim=128,
            index_head_dim=128,
            index_n_heads=64,
        )
    )
    assert all(la.index_head_dim == 128 for la in a.layers)


def test_unknown_model_type_is_a_user_error() -> None:
    with pytest.raises(ModelConfigError, match="not one deskside can plan"):
        read_arch(cfg(model_type="mamba"))


def test_a_missing_field_takes_transformers_default() -> None:
    c = cfg(model_type="llama")
    del c["hidden_size"]  # LlamaConfig's default: 4096
    assert read_arch(c).layers[0].head_size == 4096 // 16


def test_derived_max_model_len_follows_vllm() -> None:
    from deskside.planner.families.hf_config import derived_max_model_len

    # linear RoPE scaling multiplies the limit; YaRN's max_position_embeddings is already
    # scaled; the smallest length key wins
    assert (
        derived_max_model_len(
            {"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 4}}
        )
        == 16384
    )
    assert (
        derived_max_model_len(
            {"max_position_embeddings": 163840, "rope_scaling": {"type": "yarn", "factor": 40}}
        )
        == 163840
    )
    assert derived_max_model_len({"max_position_embeddings": 8192, "seq_length": 4096}) == 4096


def test_over_the_model_limit_is_refused_like_vllm(tmp_path: object) -> None:
    from pathlib import Path

    from deskside.planner.inputs import Overrides, plan_model_dir
    from deskside.tiny import write_tiny_model

    model = write_tiny_model("llama", Path(str(tmp_path)) / "m")  # 32,768 positions
    p = plan_model_dir(model, Overrides(device="cpu", kv_cache_memory=1024**3, max_model_len=40000))
    assert not p.fits and p.refusal is not None
    assert p.refusal.startswith(
        "User-specified max_model_len (40000) is greater than the derived max_model_len "
        "(max_position_embeddings=32768"
    )


def test_allow_long_max_model_len_reads_the_env_like_vllm(tmp_path: object) -> None:
    from pathlib import Path

    from deskside.hardware import PROFILES
    from deskside.planner.inputs import read_model_dir
    from deskside.planner.plan import PlanInput, plan
    from deskside.planner.types import EngineRequest
    from deskside.tiny import write_tiny_model

    arch = read_model_dir(write_tiny_model("llama", Path(str(tmp_path)) / "m"))  # 32,768
    for value, allowed in (("1", True), ("True", True), (" true ", True), ("0", False)):
        req = EngineRequest(
            device="cpu",
            kv_cache_memory=1024**3,
            max_model_len=40000,
            env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": value},
        )
        p = plan(PlanInput(arch, req, PROFILES["cpu"]))
        assert p.fits is allowed, value
        assert any("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in w for w in p.warnings) is allowed
