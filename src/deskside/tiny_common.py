"""The fields every tiny model's config.json shares (see deskside.tiny): vocabulary,
special tokens, context length, and the small decoder shape most families keep."""

from __future__ import annotations

from typing import Any

# Special token ids (deskside.tiny adds these tokens to the tokenizer first, in this order).
PAD_ID, BOS_ID, EOS_ID, IM_START_ID, IM_END_ID = range(5)

MAX_POSITION_EMBEDDINGS = 32768


def decoder(vocab_size: int, architecture: str, model_type: str) -> dict[str, Any]:
    """The base every tiny family extends: the shared fields, then the decoder shape most
    families keep (hidden 256, MLP 512, 4 query and 2 KV heads, no attention bias, untied
    embeddings); a family's own fields, put after these, win."""
    return {
        "vocab_size": vocab_size,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "max_position_embeddings": MAX_POSITION_EMBEDDINGS,
        "initializer_range": 0.02,
        "use_cache": True,
        "torch_dtype": "bfloat16",
        "architectures": [architecture],
        "model_type": model_type,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
    }
