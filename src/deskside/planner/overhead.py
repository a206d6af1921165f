"""Non-KV memory of a GPU rank: what vLLM's profiling run measures besides the weights
(the activation peak of a max_num_batched_tokens forward pass and the sampler, workspaces,
NCCL and other non-torch buffers). vLLM measures it at start-up
(vllm/utils/mem_utils.py: memory_profiling); deskside must know it before, so this is an
estimate, and every plan prints where each term comes from. CPU ranks need none of it:
their KV memory is explicit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from deskside.planner.arch import ModelArch
from deskside.planner.engine_config import EngineSettings

GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True)
class NonKVEstimate:
    parts: dict[str, int] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    outside_budget: int = 0  # allocated after vLLM fixes its budget (eats headroom)

    @property
    def total(self) -> int:
        return sum(self.parts.values())


def estimate_non_kv(arch: ModelArch, s: EngineSettings, max_model_len: int) -> NonKVEstimate:
    if s.device == "cpu":
        return NonKVEstimate()
    if arch.family == "deepseek_v4":
        from deskside.planner.arch_v4 import v4_non_kv

        return v4_non_kv(arch, s, max_model_len)
    return generic_non_kv(arch, s)


def generic_non_kv(arch: ModelArch, s: EngineSettings) -> NonKVEstimate:
    """A first-order model of the profiling run's peak:

    - activations: max_num_batched_tokens x (4 hidden + 2 MLP-intermediate per rank)
      values in the model dtype (residual, norm, attention in/out, the gate/up product);
    - sampler: max_num_seqs x vocab logits in fp32 (the dummy sampler run);
    - non-torch: NCCL and custom all-reduce buffers, 0.5 GiB with TP > 1, 0.1 GiB alone.
    """
    tp = s.tensor_parallel_size
    dtype = arch.dtype_bytes
    inter = 4 * arch.hidden_size
    if arch.moe is not None:
        inter = arch.moe.expert_intermediate_size * max(arch.moe.experts_per_token, 1)
    tokens = s.max_num_batched_tokens
    activations = tokens * (4 * arch.hidden_size + 2 * inter // tp) * dtype
    sampler = s.max_num_seqs * arch.vocab_size * 4
    non_torch = 512 * MIB if tp > 1 else 100 * MIB
    return NonKVEstimate(
        parts={"activations": activations, "sampler": sampler, "non_torch": non_torch},
        sources=(
            "non-KV memory on GPU is estimated (activations of one max_num_batched_tokens "
            "pass, fp32 sampler logits for max_num_seqs, NCCL buffers); vLLM measures it at "
            "start-up - compare with its 'Available KV cache memory' line",
        ),
    )
