"""`vllm serve` argv and environment for every node of a recipe: the head (node rank 0,
API server) and headless workers. Pure: the same recipe gives the same argv/env.

Multi-node without Ray (vLLM's multiprocessing backend): every node runs
`vllm serve MODEL --nnodes N --node-rank R --master-addr HEAD --master-port P`, workers
with `--headless`; workers may start first and wait for the head.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from deskside.recipe.types import Node, Recipe


@dataclass(frozen=True)
class NodeLaunch:
    """How one node starts its engine."""

    node: str
    node_rank: int
    role: str  # head | worker
    args: tuple[str, ...]  # arguments after `vllm`
    env: tuple[tuple[str, str], ...]  # sorted (name, value) pairs

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def shell_command(self, vllm: str = "vllm") -> str:
        """The command line, every value quoted for POSIX sh."""
        return " ".join(shlex.quote(a) for a in (vllm, *self.args))


def node_ip(node: Node) -> str:
    """The address other nodes reach this one at for engine traffic: the fabric address
    when the node has one, else its management address."""
    return str(node.fabric.address) if node.fabric else node.address


def model_reference(recipe: Recipe, recipe_path: Path | None = None) -> str:
    """What `vllm serve` loads: the local folder, or the Hugging Face repo id."""
    m = recipe.model
    if m.path:
        path = Path(m.path)
        if recipe_path is not None and not path.is_absolute():
            path = (recipe_path.parent / path).resolve()
        return str(path)
    assert m.repo is not None
    return m.repo


def engine_args(recipe: Recipe, model: str) -> list[str]:
    """Engine settings every node shares, in a stable order."""
    e = recipe.engine
    m = recipe.model
    args = ["serve", model, "--served-model-name", *m.all_names]
    if m.repo and m.revision:
        args += ["--revision", m.revision]
    args += [
        "--tensor-parallel-size",
        str(e.tensor_parallel_size),
        "--pipeline-parallel-size",
        str(e.pipeline_parallel_size),
        "--distributed-executor-backend",
        e.distributed_executor_backend,
    ]
    if e.dtype != "auto":
        args += ["--dtype", e.dtype]
    if e.load_format != "auto":
        args += ["--load-format", e.load_format]
    if e.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", e.kv_cache_dtype]
    if e.block_size is not None:
        args += ["--block-size", str(e.block_size)]
    args += ["--max-model-len", "-1" if e.max_model_len == "auto" else str(e.max_model_len)]
    if e.max_num_batched_tokens is not None:
        args += ["--max-num-batched-tokens", str(e.max_num_batched_tokens)]
    if e.max_num_seqs is not None:
        args += ["--max-num-seqs", str(e.max_num_seqs)]
    if e.kv_cache_memory is not None:
        args += ["--kv-cache-memory-bytes", str(e.kv_cache_memory)]
    elif e.gpu_memory_utilization is not None:
        args += ["--gpu-memory-utilization", str(e.gpu_memory_utilization)]
    if e.speculative is not None:
        s = e.speculative
        spec: dict[str, object] = {
            "method": s.method,
            "num_speculative_tokens": s.num_speculative_tokens,
        }
        if s.draft_sample_method:
            spec["draft_sample_method"] = s.draft_sample_method
        if s.model:
            spec["model"] = s.model
        spec.update(s.options)
        args += ["--speculative-config", json.dumps(spec, sort_keys=False, separators=(",", ":"))]
    prefix = "--enable-prefix-caching" if e.enable_prefix_caching else "--no-enable-prefix-caching"
    args.append(prefix)
    args.append(
        "--enable-chunked-prefill" if e.enable_chunked_prefill else "--no-enable-chunked-prefill"
    )
    if e.async_scheduling:
        args.append("--async-scheduling")
    if e.enforce_eager:
        args.append("--enforce-eager")
    args += list(e.extra_args)
    return args


def node_env(
    recipe: Recipe, node: Node, fabric_env: dict[str, str] | None = None
) -> dict[str, str]:
    """Per-node environment: the node's own IP for vLLM, the socket interfaces for Gloo and
    NCCL, offline hub access, the fabric's NCCL variables, then the recipe's own."""
    env: dict[str, str] = {"VLLM_HOST_IP": node_ip(node), "HF_HUB_OFFLINE": "1"}
    if node.fabric is not None:
        env["GLOO_SOCKET_IFNAME"] = node.fabric.interface
        env["NCCL_SOCKET_IFNAME"] = node.fabric.interface
    if recipe.engine.device == "cpu":
        env["VLLM_TARGET_DEVICE"] = "cpu"
    env.update(fabric_env or {})
    env.update(recipe.cluster.fabric.nccl_env)
    env.update(recipe.engine.env)
    return env


def launch_plan(
    recipe: Recipe,
    model: str,
    fabric_env: dict[str, dict[str, str]] | None = None,
) -> list[NodeLaunch]:
    """Every node's launch, workers first (the order they should start in), head last.
    `fabric_env` (per node name) defaults to the recipe's fabric: the seed's RoCE NCCL
    environment, the socket fallback or loopback (deskside.fabric.nccl); a RoCE GID index
    not given here is resolved on the node at start-up by the launch script."""
    if fabric_env is None:
        from deskside.fabric.nccl import launch_fabric_env

        fabric_env = launch_fabric_env(recipe)
    e = recipe.engine
    head = recipe.head
    shared = engine_args(recipe, model)
    nodes = [head, *recipe.workers]
    launches: list[NodeLaunch] = []
    for rank, node in enumerate(nodes):
        args = list(shared)
        if len(nodes) > 1:
            args += [
                "--nnodes",
                str(len(nodes)),
                "--node-rank",
                str(rank),
                "--master-addr",
                node_ip(head),
                "--master-port",
                str(recipe.cluster.fabric.master_port),
            ]
        if rank == 0:
            args += ["--host", e.host or node.address, "--port", str(e.port)]
        else:
            args.append("--headless")
        env = node_env(recipe, node, (fabric_env or {}).get(node.name))
        launches.append(
            NodeLaunch(
                node=node.name,
                node_rank=rank,
                role="head" if rank == 0 else "worker",
                args=tuple(args),
                env=tuple(sorted(env.items())),
            )
        )
    return [*launches[1:][::-1], launches[0]]
