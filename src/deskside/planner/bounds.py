"""The ranges deskside accepts for the numbers it plans with: a model's config.json values
and the engine settings of a plan. Pure constants.

The lower bounds are vLLM's (a layer count, a head count or a block size of 0 is refused
by vLLM or divides by zero in its arithmetic); the upper bounds are far above any published
model or machine and keep planning a matter of milliseconds. They are deskside's own: vLLM
sets none, but a config that names a billion layers is a broken (or hostile) file, not a
model.
"""

from __future__ import annotations

# --------------------------------------------------------------------------- config.json

MAX_CONFIG_BYTES = 4 * 1024 * 1024  # a config.json file (published ones are under 100 KiB)
MAX_JSON_DEPTH = 32  # nesting of objects and lists in it (published ones nest 4 deep)

MAX_LAYERS = 1_024  # num_hidden_layers (the largest published models have under 200)
MAX_HEADS = 1_024  # num_attention_heads, num_key_value_heads, index_n_heads
MAX_HEAD_DIM = 4_096  # head_dim, qk_*_head_dim, v_head_dim, index_head_dim
MAX_HIDDEN = 131_072  # hidden_size
MAX_INTERMEDIATE = 1_048_576  # intermediate_size, moe_intermediate_size
MAX_VOCAB = 10_000_000  # vocab_size
MAX_RANK = 65_536  # kv_lora_rank, q_lora_rank, o_lora_rank
MAX_EXPERTS = 4_096  # num_experts, n_routed_experts
MAX_SHARED_EXPERTS = 1_024  # n_shared_experts
MAX_POSITIONS = 2**31  # max_position_embeddings and every other length key, windows
MAX_DRAFT_LAYERS = 16  # num_nextn_predict_layers (MTP), n_mtp_layers (DSpark)
MAX_GROUPS = 4_096  # o_groups, hc_mult
MAX_ROPE_FACTOR = 1_024.0  # rope_scaling.factor
MAX_INDEX = 2**31 - 1  # layer indexes such as first_k_dense_replace, max_window_layers
MAX_NAME = 200  # architectures[0], model_type, dtype names

# --------------------------------------------------------------------------- engine settings

MAX_TENSOR_PARALLEL = 1_024
MAX_PIPELINE_PARALLEL = 256
MAX_BLOCK_SIZE = 4_096
MAX_MODEL_LEN = MAX_POSITIONS
MAX_BATCHED_TOKENS = MAX_POSITIONS
MAX_NUM_SEQS = 1_048_576
MAX_SPECULATIVE_TOKENS = 64
MAX_KV_CACHE_MEMORY = 2**50  # 1 PiB per rank
