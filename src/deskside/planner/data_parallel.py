"""Where a data-parallel deployment puts its ranks: (nodes, sizes) -> DpLayout. Pure.

vLLM 0.32 runs one engine per data-parallel (DP) rank; each engine owns TP x PP GPUs. The
layouts here are the two that vLLM 0.32 accepts across several nodes with its
multiprocessing backend, no Ray:

- `ranks`: every DP rank fits on one node (TP x PP <= the node's GPUs). Each node runs
  `vllm serve` with `--data-parallel-size-local` ranks; the head starts rank 0 and the API
  server, every other node is `--headless` with `--data-parallel-start-rank`. This is the
  layout of vLLM's data parallel deployment guide.
- `nnodes`: one DP rank is larger than a node (TP x PP > the node's GPUs), so a rank spans
  nodes. Every node then runs `vllm serve --nnodes N --node-rank R --master-addr HEAD`
  like a multi-node TP deployment, and vLLM infers each node's DP rank and local size from
  its node rank (EngineArgs.create_engine_config).

Nothing here changes a recipe: `dp_layout` reports what is wrong as `DpProblem`s, each
naming the setting to fix (`deskside.recipe.data_parallel_rules` locates them in the
recipe). `deskside.engine.dp_args` turns a layout into `vllm serve` arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# vLLM's default for --data-parallel-rpc-port (ParallelConfig.data_parallel_rpc_port)
DEFAULT_RPC_PORT = 29550

LayoutMode = Literal["ranks", "nnodes"]
# What a problem is about: the sizes themselves, how ranks fall on nodes, the GPUs of the
# nodes, the model's experts, the head's ports
ProblemKind = Literal["sizes", "ranks", "gpus", "moe", "ports"]
Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class DpProblem:
    """One thing vLLM 0.32 refuses in a layout (or that leaves a GPU idle).

    `loc` is the setting to fix, as a path from the top of a recipe (`("engine",
    "data_parallel_size")`), or from one node's entry when `node` names it (`("gpus",)`)."""

    loc: Loc
    message: str
    hint: str
    kind: ProblemKind = "sizes"
    node: str | None = None

    def __str__(self) -> str:
        return f"{self.message}; {self.hint}"


@dataclass(frozen=True)
class DpNode:
    """One node as the layout sees it: its name, the address other nodes reach it at for
    engine traffic (the fabric address when it has one) and its GPU count."""

    name: str
    address: str
    gpus: int


@dataclass(frozen=True)
class DpRequest:
    """The sizes and ports a data-parallel deployment asks for."""

    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    # DP ranks per node; None: DP / nodes when ranks fit on a node, 1 when they span nodes
    data_parallel_size_local: int | None = None
    enable_expert_parallel: bool = False
    is_moe: bool = False
    api_port: int = 8000
    rpc_port: int = DEFAULT_RPC_PORT
    master_port: int = 29500  # the torch.distributed port of the `nnodes` layout


@dataclass(frozen=True)
class NodeRanks:
    """One node's part: which DP ranks run there and whether it serves the API."""

    node: str
    node_rank: int  # the node's index, head first
    head: bool  # runs the API server (and the DP coordinator, with DP rank 0)
    start_rank: int  # first DP rank on the node
    local_size: int  # DP ranks whose engine (core) runs on the node; 0: workers only
    ports: tuple[int, ...]  # fixed TCP ports deskside knows the node binds


@dataclass(frozen=True)
class DpLayout:
    mode: LayoutMode
    nodes: tuple[NodeRanks, ...]
    head_address: str
    request: DpRequest
    # GPUs one MoE layer is split over: TP x DP (experts with expert parallel, tensors
    # without): FusedMoEParallelConfig.make
    moe_group_size: int
    # expert-parallel size: TP x DP with expert parallel on, else 1
    expert_parallel_size: int
    problems: tuple[DpProblem, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems

    def of(self, node: str) -> NodeRanks:
        return next(n for n in self.nodes if n.node == node)


DP_SIZE: Loc = ("engine", "data_parallel_size")
DP_LOCAL: Loc = ("engine", "data_parallel_size_local")


def _size_problems(req: DpRequest) -> list[DpProblem]:
    out = []
    # ParallelConfig fields: tensor/pipeline/data_parallel_size are Field(ge=1)
    for name, value in (
        ("tensor_parallel_size", req.tensor_parallel_size),
        ("pipeline_parallel_size", req.pipeline_parallel_size),
        ("data_parallel_size", req.data_parallel_size),
    ):
        if value < 1:
            out.append(
                DpProblem(
                    ("engine", name),
                    f"engine.{name} is {value}; it must be at least 1",
                    f"set {name} to 1 or more",
                )
            )
    if req.data_parallel_size == 1:
        out.append(
            DpProblem(
                DP_SIZE,
                "engine.data_parallel_size is 1: one engine needs no data-parallel layout",
                "use the tensor/pipeline-parallel launch, or set data_parallel_size to 2 or more",
            )
        )
    return out


def moe_findings(
    *, enable_expert_parallel: bool, data_parallel_size: int, is_moe: bool
) -> tuple[list[DpProblem], list[str]]:
    """What the model's experts (or their absence) mean for the layout: problems, notes."""
    problems: list[DpProblem] = []
    notes: list[str] = []
    # ModelConfig._verify_with_expert_parallelism: "Number of experts in the model must be
    # greater than 0 when expert parallelism is enabled."
    if enable_expert_parallel and not is_moe:
        problems.append(
            DpProblem(
                ("engine", "enable_expert_parallel"),
                "engine.enable_expert_parallel is true but the model has no experts (not "
                "MoE); vLLM refuses it",
                "set enable_expert_parallel to false",
                kind="moe",
            )
        )
    # EngineCoreProc.run_engine_core: a dense model's DP ranks run as independent engines
    # (reconfigure_for_independent_dp_rank); the API server still balances between them
    if data_parallel_size > 1 and not is_moe:
        notes.append(
            "the model is dense: its data-parallel ranks are independent replicas behind "
            "one API server; nothing is shared between them but the load balancing"
        )
    return problems, notes


PORT_LOCS: dict[str, Loc] = {
    "engine.port": ("engine", "port"),
    "engine.data_parallel_rpc_port": ("engine", "data_parallel_rpc_port"),
    "cluster.fabric.master_port": ("cluster", "fabric", "master_port"),
}


def _port_problems(req: DpRequest, mode: LayoutMode) -> list[DpProblem]:
    out = []
    ports = {"engine.port": req.api_port, "engine.data_parallel_rpc_port": req.rpc_port}
    if mode == "nnodes":
        ports["cluster.fabric.master_port"] = req.master_port
    for name, port in ports.items():
        # ParallelConfig.data_parallel_rpc_port: Field(ge=1, le=65535)
        if not 1 <= port <= 65535:
            out.append(
                DpProblem(
                    PORT_LOCS[name],
                    f"{name} is {port}; a TCP port is between 1 and 65535",
                    "pick a port in that range",
                    kind="ports",
                )
            )
    seen: dict[int, str] = {}
    for name, port in ports.items():
        if port in seen:
            out.append(
                DpProblem(
                    PORT_LOCS[name],
                    f"{name} and {seen[port]} are both {port}: the head binds both",
                    f"give {name} another port",
                    kind="ports",
                )
            )
        seen.setdefault(port, name)
    return out


def _ranks_layout(
    nodes: list[DpNode], req: DpRequest, per_rank: int
) -> tuple[list[tuple[int, int]], list[DpProblem]]:
    """(start rank, local size) per node for DP ranks that fit on one node."""
    dp = req.data_parallel_size
    local = req.data_parallel_size_local
    problems: list[DpProblem] = []
    if local is None:
        if dp % len(nodes):
            problems.append(
                DpProblem(
                    DP_SIZE,
                    f"engine.data_parallel_size {dp} does not split evenly over {len(nodes)} nodes",
                    "set data_parallel_size to a multiple of the node count",
                    kind="ranks",
                )
            )
        local = max(dp // len(nodes), 1)
    # ParallelConfig._validate_parallel_config: data_parallel_size_local <= data_parallel_size
    elif local > dp:
        problems.append(
            DpProblem(
                DP_LOCAL,
                f"engine.data_parallel_size_local {local} is more than data_parallel_size "
                f"{dp}; vLLM refuses it",
                f"set data_parallel_size_local to data_parallel_size / nodes ({dp} / {len(nodes)})",
                kind="ranks",
            )
        )
    # run_headless: "data_parallel_size_local must be > 0 in headless mode"
    elif local < 1:
        problems.append(
            DpProblem(
                DP_LOCAL,
                f"engine.data_parallel_size_local is {local}; every node but the head runs "
                "headless, which needs at least 1 local rank",
                "set data_parallel_size_local to 1 or more",
                kind="ranks",
            )
        )
    # ParallelConfig.__post_init__: data_parallel_rank must be in [0, data_parallel_size);
    # the nodes' start ranks (--data-parallel-start-rank) must cover every rank once
    elif local * len(nodes) != dp:
        problems.append(
            DpProblem(
                DP_LOCAL,
                f"engine.data_parallel_size_local {local} x {len(nodes)} nodes = "
                f"{local * len(nodes)} ranks, but data_parallel_size is {dp}",
                "make them equal, or leave data_parallel_size_local out",
                kind="ranks",
            )
        )
    for n in nodes:
        # current_platform.device_count() < world_size is refused per engine; deskside
        # also refuses idle GPUs: each node holds data_parallel_size_local x TP x PP GPUs
        need = local * per_rank
        if need != n.gpus and local >= 1:
            problems.append(
                DpProblem(
                    ("gpus",),
                    f"node {n.name} has {n.gpus} GPUs but data_parallel_size_local {local} x "
                    f"tensor_parallel_size x pipeline_parallel_size ({per_rank}) needs {need}",
                    "change engine.data_parallel_size_local or the parallel sizes, or the "
                    "node's gpus",
                    kind="gpus",
                    node=n.name,
                )
            )
    return [(i * local, local) for i in range(len(nodes))], problems


def _nnodes_layout(
    nodes: list[DpNode], req: DpRequest, per_rank: int
) -> tuple[list[tuple[int, int]], list[DpProblem]]:
    """(DP rank, local size) per node when one DP rank spans several nodes, as vLLM infers
    them from --node-rank (EngineArgs.create_engine_config)."""
    dp = req.data_parallel_size
    n = len(nodes)
    problems: list[DpProblem] = []
    gpus = {node.gpus for node in nodes}
    if len(gpus) > 1:
        # create_engine_config: local_world_size = world_size // nnodes, the same on every node
        problems.append(
            DpProblem(
                ("cluster", "nodes"),
                "nodes have different GPU counts ("
                + ", ".join(f"{node.name}: {node.gpus}" for node in nodes)
                + "); a data-parallel rank that spans nodes needs the same count on each",
                "give every node the same number of GPUs",
                kind="gpus",
            )
        )
    # create_engine_config infers data_parallel_size_local = max(local_world_size //
    # world_size_within_dp, 1) = 1 here; more local ranks leave nnodes_within_dp wrong
    if req.data_parallel_size_local not in (None, 1):
        problems.append(
            DpProblem(
                DP_LOCAL,
                f"engine.data_parallel_size_local is {req.data_parallel_size_local} but one "
                f"data-parallel rank (tensor x pipeline = {per_rank} GPUs) spans several "
                "nodes; a node can then hold part of one rank only",
                "set data_parallel_size_local to 1, or leave it out",
                kind="ranks",
            )
        )
    world = dp * per_rank
    # create_engine_config: "`--nnodes N` must evenly divide the total world size"
    if world % n:
        problems.append(
            DpProblem(
                DP_SIZE,
                f"data_parallel_size x tensor x pipeline = {world} GPUs does not split "
                f"evenly over {n} nodes",
                "change engine.data_parallel_size or the node count",
                kind="gpus",
            )
        )
        return [(0, 1)] * n, problems
    local_world = world // n
    # ParallelConfig.nnodes_within_dp: nnodes % (data_parallel_size / local) == 0, and
    # MultiprocExecutor._init_executor: world_size % nnodes_within_dp == 0
    if n % dp or per_rank % (n // dp):
        problems.append(
            DpProblem(
                DP_SIZE,
                f"{n} nodes do not split into {dp} equal groups of whole nodes for "
                f"{per_rank} GPUs each",
                "use a node count that is a multiple of engine.data_parallel_size",
                kind="ranks",
            )
        )
    for node in nodes:
        if node.gpus != local_world:
            problems.append(
                DpProblem(
                    ("gpus",),
                    f"node {node.name} has {node.gpus} GPUs but this layout puts "
                    f"{local_world} on each node",
                    "change the parallel sizes or the node's gpus",
                    kind="gpus",
                    node=node.name,
                )
            )
    # create_engine_config: inferred DP rank = node_rank * local_world_size // (TP x PP);
    # only the first node of each rank's group runs its engine core (run_headless:
    # node_rank_within_dp > 0 runs workers only)
    group = max(n // dp, 1)
    out = [(r * local_world // per_rank, 1 if r % group == 0 else 0) for r in range(n)]
    return out, problems


def dp_layout(nodes: list[DpNode], req: DpRequest) -> DpLayout:
    """The data-parallel layout of `req` over `nodes` (head first), with every problem vLLM
    0.32 would refuse at start-up, or that leaves a GPU idle."""
    if not nodes:
        raise ValueError("a data-parallel layout needs at least one node")
    problems = _size_problems(req)
    moe_problems, notes = moe_findings(
        enable_expert_parallel=req.enable_expert_parallel,
        data_parallel_size=req.data_parallel_size,
        is_moe=req.is_moe,
    )
    problems += moe_problems
    per_rank = max(req.tensor_parallel_size, 1) * max(req.pipeline_parallel_size, 1)
    dp = max(req.data_parallel_size, 1)
    mode: LayoutMode = "ranks" if per_rank <= min(n.gpus for n in nodes) else "nnodes"
    if mode == "ranks":
        ranks, found = _ranks_layout(nodes, req, per_rank)
    else:
        ranks, found = _nnodes_layout(nodes, req, per_rank)
    problems += found
    problems += _port_problems(req, mode)
    moe_group = max(req.tensor_parallel_size, 1) * dp
    # FusedMoEParallelConfig.make: use_ep = dp x pcp x tp > 1 and enable_expert_parallel
    ep_size = moe_group if req.enable_expert_parallel and moe_group > 1 else 1
    if req.enable_expert_parallel and req.is_moe and moe_group == 1:
        notes.append("enable_expert_parallel has no effect with one GPU per MoE layer")
    out = []
    for i, (node, (start, local)) in enumerate(zip(nodes, ranks, strict=True)):
        head = i == 0
        ports: list[int] = []
        if head:
            # the API server; launch_core_engines binds the DP handshake at
            # tcp://data_parallel_address:data_parallel_rpc_port when engines are remote
            ports += [req.api_port, req.rpc_port]
            if mode == "nnodes":
                ports.append(
                    req.master_port
                )  # torch.distributed world group (init_distributed_environment)
        out.append(
            NodeRanks(
                node=node.name,
                node_rank=i,
                head=head,
                start_rank=start,
                local_size=local,
                ports=tuple(ports),
            )
        )
    return DpLayout(
        mode=mode,
        nodes=tuple(out),
        head_address=nodes[0].address,
        request=req,
        moe_group_size=moe_group,
        expert_parallel_size=ep_size,
        problems=tuple(problems),
        notes=tuple(notes),
    )
