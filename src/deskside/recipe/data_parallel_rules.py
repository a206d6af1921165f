"""Recipe rules for data parallelism: the `engine.data_parallel_*` fields against each
other and against the nodes, as located `Problem`s.

The layout rules themselves are `deskside.planner.data_parallel.dp_layout` (vLLM 0.32's, each
naming its vLLM function); here they are run on the recipe's nodes and their problems
pointed at the recipe's keys. Whether the model has experts is known only once its
config.json is read, so `enable_expert_parallel` on a dense model is the planner's to refuse.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from deskside.planner.data_parallel import (
    DEFAULT_RPC_PORT,
    DpLayout,
    DpNode,
    DpProblem,
    DpRequest,
    dp_layout,
)
from deskside.recipe.cluster import Node
from deskside.recipe.problems import LocPath, Problem

# vLLM flags deskside derives from the data-parallel fields (EngineArgs.add_cli_args names
# each with a short alias), refused in engine.extra_args like the other managed flags
DATA_PARALLEL_FLAGS = {
    "--data-parallel-size": "engine.data_parallel_size",
    "-dp": "engine.data_parallel_size",
    "--data-parallel-size-local": "engine.data_parallel_size_local",
    "-dpl": "engine.data_parallel_size_local",
    "--data-parallel-start-rank": "the node's place in cluster.nodes (deskside sets it per node)",
    "-dpr": "the node's place in cluster.nodes (deskside sets it per node)",
    "--data-parallel-address": "the head node's address",
    "-dpa": "the head node's address",
    "--data-parallel-rpc-port": "engine.data_parallel_rpc_port",
    "-dpp": "engine.data_parallel_rpc_port",
    "--enable-expert-parallel": "engine.enable_expert_parallel",
    "--no-enable-expert-parallel": "engine.enable_expert_parallel",
    "-ep": "engine.enable_expert_parallel",
}


class EngineParallel(Protocol):
    """The engine fields the data-parallel rules read (the recipe's `Engine`)."""

    @property
    def tensor_parallel_size(self) -> int: ...
    @property
    def pipeline_parallel_size(self) -> int: ...
    @property
    def data_parallel_size(self) -> int: ...
    @property
    def data_parallel_size_local(self) -> int | None: ...
    @property
    def data_parallel_rpc_port(self) -> int: ...
    @property
    def enable_expert_parallel(self) -> bool: ...
    @property
    def distributed_executor_backend(self) -> str: ...
    @property
    def port(self) -> int: ...


def engine_data_parallel_problems(engine: EngineParallel) -> list[Problem]:
    """Rules within the engine section (paths relative to it)."""
    problems: list[Problem] = []
    dp = engine.data_parallel_size
    if engine.data_parallel_size_local is not None and dp == 1:
        problems.append(
            Problem(
                ("data_parallel_size_local",),
                "data_parallel_size_local applies only with data_parallel_size above 1",
                "remove data_parallel_size_local, or set data_parallel_size",
            )
        )
    # deskside's layouts run vLLM's multiprocessing DP backend (--data-parallel-backend mp,
    # its default); a Ray executor would need Ray's DP backend and placement
    if dp > 1 and engine.distributed_executor_backend != "mp":
        problems.append(
            Problem(
                ("distributed_executor_backend",),
                "deskside runs data parallelism with vLLM's multiprocessing backend only",
                "set distributed_executor_backend: mp, or data_parallel_size: 1",
            )
        )
    return problems


def dp_request(engine: EngineParallel, master_port: int, *, is_moe: bool = True) -> DpRequest:
    """The layout request of a recipe's engine (`is_moe`: whether the model has experts;
    the recipe does not know, so by default the MoE rules are left to the planner)."""
    return DpRequest(
        tensor_parallel_size=engine.tensor_parallel_size,
        pipeline_parallel_size=engine.pipeline_parallel_size,
        data_parallel_size=engine.data_parallel_size,
        data_parallel_size_local=engine.data_parallel_size_local,
        enable_expert_parallel=engine.enable_expert_parallel,
        is_moe=is_moe,
        api_port=engine.port,
        rpc_port=engine.data_parallel_rpc_port,
        master_port=master_port,
    )


def recipe_layout(
    ranked: Sequence[Node],
    engine: EngineParallel,
    master_port: int,
    *,
    address: Callable[[Node], str] = lambda node: node.address,
) -> DpLayout:
    """The data-parallel layout of `ranked` (the nodes by node rank, head first); `address`
    gives the address other nodes reach a node at (the launch passes the fabric's)."""
    nodes = [DpNode(n.name, address(n), n.gpus) for n in ranked]
    return dp_layout(nodes, dp_request(engine, master_port))


def _located(problem: DpProblem, index_of: dict[str, int]) -> Problem:
    if problem.node is not None:
        where: LocPath = ("cluster", "nodes", index_of[problem.node])
        return Problem((*where, *problem.loc), problem.message, problem.hint, (where,))
    fallback: tuple[LocPath, ...] = (("engine", "data_parallel_size"), ("engine",))
    return Problem(problem.loc, problem.message, problem.hint, fallback)


def data_parallel_problems(
    nodes: Sequence[Node], engine: EngineParallel, *, master_port: int
) -> list[Problem]:
    """The layout's problems at the recipe's keys (paths from the top). Port clashes are
    `head_port_problems`' (the head's ports include the RPC port), and when the GPUs in all
    differ from data x tensor x pipeline, `rank_problems` says so once, not per node."""
    heads = [n for n in nodes if n.role == "head"]
    if engine.data_parallel_size == 1 or len(heads) != 1:
        return []
    ranked = [*heads, *(n for n in nodes if n.role != "head")]
    layout = recipe_layout(ranked, engine, master_port)
    ranks = engine.data_parallel_size * engine.tensor_parallel_size
    ranks *= engine.pipeline_parallel_size
    total_off = ranks != sum(n.gpus for n in nodes)
    index_of = {n.name: i for i, n in enumerate(nodes)}
    return [
        _located(p, index_of)
        for p in layout.problems
        if p.kind != "ports" and not (p.kind == "gpus" and total_off)
    ]


__all__ = [
    "DATA_PARALLEL_FLAGS",
    "DEFAULT_RPC_PORT",
    "EngineParallel",
    "data_parallel_problems",
    "dp_request",
    "engine_data_parallel_problems",
    "recipe_layout",
]
