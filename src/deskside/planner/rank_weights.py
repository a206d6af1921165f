"""The weight bytes one GPU holds, by how vLLM 0.32 splits each part of a model over tensor,
pipeline and data parallelism. Pure.

- Tensor parallel (TP): linear layers, embeddings and the LM head are split over the TP
  ranks; routers and norms are whole on each (`ModelArch.weight_bytes_per_rank`).
- Pipeline parallel (PP): a stage holds its own layers (get_pp_indices), the embeddings on
  the first stage, the LM head and the draft layers on the last.
- Data parallel (DP): every DP rank is a whole engine, so all of the above holds per DP
  rank, except the routed experts: one MoE layer spans TP x DP GPUs
  (FusedMoEParallelConfig.make). Without expert parallel each expert is split over them;
  with it each GPU holds whole experts, the first ones ceil(E / (TP x DP))
  (determine_expert_map). DeepSeek's shared experts are whole on every GPU when its MoE
  runs sequence parallel (ParallelConfig.use_sequence_parallel_moe: expert parallel,
  TP > 1 and DP > 1; DeepseekV2MoE and DeepseekV4MoE then build them with disable_tp).
"""

from __future__ import annotations

from dataclasses import dataclass

from deskside.planner.types import ModelArch, weight_bytes_by_part
from deskside.units import format_gib


@dataclass(frozen=True)
class Split:
    """How the engine splits the model: TP x PP GPUs per engine, DP engines."""

    tp: int
    pp: int
    dp: int = 1
    expert_parallel: bool = False

    @property
    def moe_group(self) -> int:
        """GPUs one MoE layer spans (FusedMoEParallelConfig.flatten_tp_across_dp_and_pcp)."""
        return self.tp * self.dp

    @property
    def uses_ep(self) -> bool:
        # FusedMoEParallelConfig.make: use_ep = dp x pcp x tp > 1 and enable_expert_parallel
        return self.expert_parallel and self.moe_group > 1


def pp_partitions(num_layers: int, pp: int) -> list[int]:
    """vllm.distributed.utils.get_pp_indices: layers per stage, the remainder spread over
    the stages before the last."""
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def experts_per_gpu(arch: ModelArch, split: Split) -> int | None:
    """Whole experts the first GPU of a MoE layer holds with expert parallel
    (determine_expert_map: E // EP, one more on the first E % EP ranks); None without."""
    if arch.moe is None or not split.uses_ep:
        return None
    return -(-arch.moe.num_experts // split.moe_group)


def expert_share(arch: ModelArch, split: Split) -> float:
    """The fraction of the routed experts' bytes the first GPU of a MoE layer holds."""
    whole = experts_per_gpu(arch, split)
    if whole is not None and arch.moe is not None:
        return whole / arch.moe.num_experts
    return 1 / split.moe_group


def shared_experts_whole(arch: ModelArch, split: Split) -> bool:
    """DeepSeek's shared experts unsplit: ParallelConfig.use_sequence_parallel_moe (the
    default all2all backend, allgather_reducescatter, is one of its backends)."""
    return arch.family.startswith("deepseek") and split.uses_ep and split.tp > 1 and split.dp > 1


def rank_weight_bytes(
    arch: ModelArch, weights_format: str | None, split: Split, drafts: int, stage: int
) -> int:
    """Weight bytes of the most loaded GPU of pipeline stage `stage`, with `drafts` draft
    layers loaded on the last stage."""
    tp, pp = split.tp, split.pp
    if split.dp == 1 and not split.expert_parallel and pp == 1:
        return arch.weight_bytes_per_rank(tp, weights_format, drafts)
    here = drafts if stage == pp - 1 else 0
    parts = weight_bytes_by_part(arch, weights_format, here)
    share = pp_partitions(arch.num_hidden_layers, pp)[stage] / arch.num_hidden_layers
    if split.dp == 1 and not split.expert_parallel:
        layered = ("attention", "dense_mlp", "experts", "shared_experts")
        sharded = sum(parts[k] for k in layered) * share
        sharded += parts["embedding"] if stage == 0 else 0
        sharded += parts["lm_head"] + parts["draft"] if stage == pp - 1 else 0
        sharded += parts["vision"]  # the vision tower is built on every stage
        return int(sharded / tp + (parts["router"] + parts["norms"]) * share)
    p = arch.params
    per_expert_param = parts["experts"] / p.experts if p.experts else 0.0
    draft_experts = here * p.draft_layer_experts * per_expert_param
    experts = (parts["experts"] * share + draft_experts) * expert_share(arch, split)
    shared = parts["shared_experts"] * share / (1 if shared_experts_whole(arch, split) else tp)
    sharded = (parts["attention"] + parts["dense_mlp"]) * share
    sharded += parts["embedding"] if stage == 0 else 0
    sharded += parts["lm_head"] + parts["draft"] - draft_experts if stage == pp - 1 else 0
    sharded += parts["vision"]
    return int(sharded / tp + shared + experts + (parts["router"] + parts["norms"]) * share)


def data_parallel_notes(arch: ModelArch, split: Split, weights: int) -> list[str]:
    """What the plan assumes about data parallelism, for its assumptions."""
    if split.dp == 1:
        return []
    group = f"TP x DP = {split.tp} x {split.dp} = {split.moe_group} GPUs"
    whole = experts_per_gpu(arch, split)
    if arch.moe is None:
        experts = "the model has no routed experts: each DP rank holds all its weights"
    elif whole is not None:
        experts = (
            f"with expert parallel each GPU holds whole experts, at most {whole} of "
            f"{arch.moe.num_experts} (determine_expert_map)"
        )
    else:
        experts = "without expert parallel every expert is split over them"
    shared = "whole" if shared_experts_whole(arch, split) else f"split over TP ({split.tp})"
    return [
        f"data parallel: {split.dp} engines (DP ranks), each with its own scheduler and KV "
        "cache; the per-rank figures are one engine's, and max_num_seqs and "
        "max_num_batched_tokens apply per DP rank",
        f"weights per GPU {format_gib(weights)}: routed experts span {group} "
        f"(FusedMoEParallelConfig.make), {experts}; attention, embeddings, the LM head and "
        f"draft layers are whole on each DP rank (split over TP only), shared experts {shared}",
        "non-KV memory is one engine's estimate: with data parallel the MoE layers also see "
        "the other DP ranks' tokens (the default all2all backend, allgather_reducescatter, "
        "gathers up to DP x max_num_batched_tokens), which is not counted, so vLLM may "
        "find less KV memory than planned",
    ]
