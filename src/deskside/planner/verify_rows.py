"""Speculative decoding on sparse-MLA models: the verify rows of one decode step.

With speculation every running sequence is verified as a decode of 1 +
num_speculative_tokens query rows (vLLM's attention.backend.max_decode_query_len), so one
step carries max_num_seqs x (num_speculative_tokens + 1) rows. FlashInfer's sparse-MLA
decode (DeepSeek-V3.2/V4 attention on GPU, the DSpark engine's path) handles at most 64
such rows; past it a full batch leaves that kernel. The plan warns (it does not refuse):
the engine starts, and light loads never reach the limit. Pure.
"""

from __future__ import annotations

from deskside.planner.types import EngineSettings, ModelArch

# FlashInfer sparse-MLA decode (trtllm-gen, used by vLLM's FlashInferMLASparse backends):
# at most 64 query rows per decode call.
MAX_VERIFY_ROWS = 64


def sparse_mla(arch: ModelArch) -> bool:
    """The model's attention is sparse MLA (a DeepSeek-V3.2/V4 indexer picks the keys)."""
    return arch.use_mla and any(layer.index_head_dim is not None for layer in arch.layers)


def verify_rows_warning(arch: ModelArch, s: EngineSettings) -> str | None:
    """The warning when a full batch of verifications exceeds the 64-row limit, else None."""
    spec = s.speculative
    if spec is None or s.device != "gpu" or not sparse_mla(arch):
        return None
    per_seq = spec.num_speculative_tokens + 1
    rows = s.max_num_seqs * per_seq
    if rows <= MAX_VERIFY_ROWS:
        return None
    fit_seqs = MAX_VERIFY_ROWS // per_seq
    fit_tokens = MAX_VERIFY_ROWS // s.max_num_seqs - 1
    lower_tokens = f", or num_speculative_tokens to {fit_tokens} or less" if fit_tokens >= 1 else ""
    return (
        f"max_num_seqs {s.max_num_seqs} x (num_speculative_tokens {spec.num_speculative_tokens}"
        f" + 1) = {rows} verify rows per decode step, over the {MAX_VERIFY_ROWS} rows "
        "FlashInfer's sparse-MLA decode handles: a full batch of speculative verifications "
        f"exceeds it. Lower max_num_seqs to {fit_seqs} or less{lower_tokens}"
    )
