"""deskside.tiny: tiny random-weight model folders for vLLM."""

from __future__ import annotations

import hashlib
import json
import pathlib
from typing import Any

import jinja2
import pytest
from tokenizers import Tokenizer

from deskside import tiny

FILES = (
    "config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
)

COMMON_KEYS = {
    "architectures",
    "model_type",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "max_position_embeddings",
    "rms_norm_eps",
    "bos_token_id",
    "eos_token_id",
    "torch_dtype",
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    root = tmp_path_factory.mktemp("tiny")
    return {arch: tiny.write_tiny_model(arch, root / arch) for arch in tiny.ARCHS}


def _config(path: pathlib.Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((path / "config.json").read_text())
    return data


def _digests(path: pathlib.Path) -> dict[str, str]:
    return {f: hashlib.sha256((path / f).read_bytes()).hexdigest() for f in FILES}


def test_archs() -> None:
    assert tiny.ARCHS == (
        "deepseek-v3",
        "llama",
        "qwen3",
        "gemma3",
        "gpt-oss",
        "glm4-moe",
        "kimi-k2",
        "llama4",
        "qwen3-next",
        "nemotron-h",
    )


def test_writes_all_files(models: dict[str, pathlib.Path]) -> None:
    for path in models.values():
        assert sorted(p.name for p in path.iterdir()) == sorted(FILES)
        for f in FILES:
            json.loads((path / f).read_text())  # all valid JSON


@pytest.mark.parametrize("arch", tiny.ARCHS)
def test_deterministic(arch: str, tmp_path: pathlib.Path, models: dict[str, pathlib.Path]) -> None:
    again = tiny.write_tiny_model(arch, tmp_path / "again")
    assert _digests(again) == _digests(models[arch])


def test_json_sorted_keys(models: dict[str, pathlib.Path]) -> None:
    text = (models["llama"] / "config.json").read_text()
    data = json.loads(text)
    assert text == json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def test_overrides_shallow_update(tmp_path: pathlib.Path, models: dict[str, pathlib.Path]) -> None:
    out = tiny.write_tiny_model(
        "llama", tmp_path / "o", {"max_position_embeddings": 1048576, "num_hidden_layers": 2}
    )
    cfg, base = _config(out), _config(models["llama"])
    assert cfg["max_position_embeddings"] == 1048576
    assert cfg["num_hidden_layers"] == 2
    assert {
        k: v for k, v in cfg.items() if k not in ("max_position_embeddings", "num_hidden_layers")
    } == {
        k: v for k, v in base.items() if k not in ("max_position_embeddings", "num_hidden_layers")
    }
    # same overrides, same bytes
    again = tiny.write_tiny_model(
        "llama", tmp_path / "o2", {"num_hidden_layers": 2, "max_position_embeddings": 1048576}
    )
    assert _digests(again) == _digests(out)


def test_unknown_arch(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="unknown arch"):
        tiny.write_tiny_model("mamba", tmp_path)


@pytest.mark.parametrize("arch", tiny.ARCHS)
def test_config_common(arch: str, models: dict[str, pathlib.Path]) -> None:
    cfg = _config(models[arch])
    missing = COMMON_KEYS - cfg.keys()
    assert not missing
    assert cfg["max_position_embeddings"] >= 32768
    assert 256 <= cfg["hidden_size"] <= 512
    assert 2 <= cfg["num_hidden_layers"] <= 4
    # vocab covers the tokenizer
    tok = Tokenizer.from_file(str(models[arch] / "tokenizer.json"))
    assert cfg["vocab_size"] >= tok.get_vocab_size(with_added_tokens=True)
    assert 1000 <= tok.get_vocab_size(with_added_tokens=True) <= 4096
    # TP=2 can split the KV heads (MLA is replicated per rank instead)
    if arch not in ("deepseek-v3", "kimi-k2"):
        assert cfg["num_key_value_heads"] >= 2
        assert cfg["num_key_value_heads"] % 2 == 0
        assert cfg["num_attention_heads"] % cfg["num_key_value_heads"] == 0


def test_config_llama(models: dict[str, pathlib.Path]) -> None:
    cfg = _config(models["llama"])
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["model_type"] == "llama"
    assert (cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"]) == (4, 2, 64)


def test_config_qwen3(models: dict[str, pathlib.Path]) -> None:
    cfg = _config(models["qwen3"])
    assert cfg["architectures"] == ["Qwen3ForCausalLM"]
    assert cfg["model_type"] == "qwen3"
    assert cfg["head_dim"] == 128
    assert cfg["num_key_value_heads"] == 4


def test_config_gemma3(models: dict[str, pathlib.Path]) -> None:
    cfg = _config(models["gemma3"])
    assert cfg["architectures"] == ["Gemma3ForCausalLM"]
    assert cfg["model_type"] == "gemma3_text"
    types = cfg["layer_types"]
    assert len(types) == cfg["num_hidden_layers"]
    assert set(types) == {"sliding_attention", "full_attention"}
    assert cfg["sliding_window"] in (256, 512)
    assert cfg["query_pre_attn_scalar"] > 0
    assert "hidden_activation" in cfg


def test_config_deepseek_v3(models: dict[str, pathlib.Path]) -> None:
    cfg = _config(models["deepseek-v3"])
    assert cfg["architectures"] == ["DeepseekV3ForCausalLM"]
    assert cfg["model_type"] == "deepseek_v3"
    # the CPU MLA kernel only takes a 576-wide latent
    assert cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"] == 576
    assert cfg["kv_lora_rank"] == 512
    assert 4 <= cfg["n_routed_experts"] <= 8
    assert cfg["n_shared_experts"] == 1
    assert cfg["num_experts_per_tok"] <= cfg["n_routed_experts"]
    assert 1 <= cfg["first_k_dense_replace"] < cfg["num_hidden_layers"]
    assert cfg["num_nextn_predict_layers"] == 1
    for key in ("q_lora_rank", "qk_nope_head_dim", "v_head_dim", "moe_intermediate_size"):
        assert cfg[key] > 0


def test_config_gpt_oss(models: dict[str, pathlib.Path]) -> None:
    cfg = _config(models["gpt-oss"])
    assert cfg["architectures"] == ["GptOssForCausalLM"]
    # alternating sliding / full layers (vLLM slides the even ones), MoE on every layer
    assert cfg["layer_types"][:2] == ["sliding_attention", "full_attention"]
    assert cfg["sliding_window"] < 4096
    assert cfg["num_experts_per_tok"] < cfg["num_local_experts"]


def test_config_glm4_moe(models: dict[str, pathlib.Path]) -> None:
    cfg = _config(models["glm4-moe"])
    assert cfg["architectures"] == ["Glm4MoeForCausalLM"]
    assert 1 <= cfg["first_k_dense_replace"] < cfg["num_hidden_layers"]
    assert cfg["n_shared_experts"] == 1 and cfg["num_nextn_predict_layers"] == 1
    assert cfg["partial_rotary_factor"] < 1


def test_config_kimi_k2_is_deepseek_v3_renamed(models: dict[str, pathlib.Path]) -> None:
    cfg = _config(models["kimi-k2"])
    assert cfg["model_type"] == "kimi_k2"
    assert cfg["architectures"] == ["DeepseekV3ForCausalLM"]
    assert {**cfg, "model_type": "deepseek_v3"} == _config(models["deepseek-v3"])


def test_config_llama4(models: dict[str, pathlib.Path]) -> None:
    cfg = _config(models["llama4"])
    assert cfg["architectures"] == ["Llama4ForCausalLM"]
    assert cfg["model_type"] == "llama4_text"
    # chunks shorter than the e2e case's max_model_len, one global (NoPE) layer
    assert cfg["attention_chunk_size"] < 16384
    assert cfg["no_rope_layers"].count(0) == 1
    assert cfg["interleave_moe_layer_step"] == 2


def test_tokenizer_special_tokens(models: dict[str, pathlib.Path]) -> None:
    path = models["llama"]
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    tcfg = json.loads((path / "tokenizer_config.json").read_text())
    cfg = _config(path)
    for key, id_key in (
        ("bos_token", "bos_token_id"),
        ("eos_token", "eos_token_id"),
        ("pad_token", "pad_token_id"),
    ):
        assert tok.token_to_id(tcfg[key]) == cfg[id_key]
    added = {
        t["content"]: t for t in json.loads((path / "tokenizer.json").read_text())["added_tokens"]
    }
    for t in (tcfg["bos_token"], tcfg["eos_token"], tcfg["pad_token"]):
        assert added[t]["special"] is True
    # tokenizer_config mirrors tokenizer.json's added tokens
    assert {int(k): v["content"] for k, v in tcfg["added_tokens_decoder"].items()} == {
        v["id"]: k for k, v in added.items()
    }


def test_think_tokens_are_single_tokens(models: dict[str, pathlib.Path]) -> None:
    tok = Tokenizer.from_file(str(models["qwen3"] / "tokenizer.json"))
    start, end = tok.token_to_id("<think>"), tok.token_to_id("</think>")
    assert start is not None and end is not None and start != end
    enc = tok.encode("<think>reason here</think>answer", add_special_tokens=False)
    assert enc.ids[0] == start
    assert end in enc.ids
    assert enc.tokens.count("<think>") == 1 and enc.tokens.count("</think>") == 1
    # registered added tokens that are never split; kept by skip_special_tokens decoding
    # (like Qwen3/DeepSeek-R1) so reasoning text keeps its delimiters
    added = {t["content"]: t for t in json.loads(tok.to_str())["added_tokens"]}
    assert "<think>" in added and "</think>" in added
    assert "<think>" in tok.decode(enc.ids, skip_special_tokens=True)


def test_bos_added_and_roundtrip(models: dict[str, pathlib.Path]) -> None:
    tok = Tokenizer.from_file(str(models["llama"] / "tokenizer.json"))
    text = "The quick brown fox jumps over the lazy dog. 12345 ünïcode"
    enc = tok.encode(text)
    assert enc.ids[0] == tok.token_to_id("<s>")
    assert tok.decode(enc.ids, skip_special_tokens=True) == text


def _render(path: pathlib.Path, messages: list[dict[str, str]], **kw: Any) -> str:
    tcfg = json.loads((path / "tokenizer_config.json").read_text())
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(msg: str) -> None:
        raise jinja2.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    out: str = env.from_string(tcfg["chat_template"]).render(
        messages=messages, bos_token=tcfg["bos_token"], eos_token=tcfg["eos_token"], **kw
    )
    return out


def test_chat_template(models: dict[str, pathlib.Path]) -> None:
    path = models["gemma3"]
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi?"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Bye?"},
    ]
    plain = _render(path, msgs, add_generation_prompt=False)
    assert plain == (
        "<s><|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi?<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n"
        "<|im_start|>user\nBye?<|im_end|>\n"
    )
    gen = _render(path, msgs, add_generation_prompt=True)
    assert gen == plain + "<|im_start|>assistant\n"
    no_think = _render(path, msgs, add_generation_prompt=True, enable_thinking=False)
    assert no_think == gen + "<think>\n\n</think>\n\n"
    with pytest.raises(jinja2.TemplateError):
        _render(path, [{"role": "tool", "content": "x"}], add_generation_prompt=True)
    # rendered prompt tokenizes with the chat markers as single tokens
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    ids = tok.encode(gen, add_special_tokens=False).ids
    assert ids.count(tok.token_to_id("<|im_start|>")) == 5
    assert ids.count(tok.token_to_id("<|im_end|>")) == 4
