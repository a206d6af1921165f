"""The `vllm serve` arguments of one node in a data-parallel layout. Pure.

These come after the arguments every node shares (`deskside.engine.launch.engine_args`:
model, tensor/pipeline sizes, lengths, ...) and replace the multi-node arguments of a
tensor-parallel launch:

- `ranks` layout (vLLM's data parallel deployment guide): no `--nnodes`; the head gets
  `--data-parallel-size D --data-parallel-size-local L --data-parallel-address HEAD
  --data-parallel-rpc-port P` and serves the API; every other node gets `--headless` and
  `--data-parallel-start-rank S` as well. The head never gets a start rank: on a node that
  is not headless it switches vLLM to hybrid load balancing (EngineArgs.create_engine_config).
- `nnodes` layout: `--data-parallel-size D --nnodes N --node-rank R --master-addr HEAD
  --master-port M`, workers `--headless`; vLLM infers each node's DP rank and local size
  from its node rank. The DP address and RPC port are given too, so they never depend on
  vLLM's defaults.

`--enable-expert-parallel` goes to every node (the guide: "on all nodes in the multi-node
case"), with data parallelism or without (`expert_parallel_args`).
"""

from __future__ import annotations

from deskside.planner.data_parallel import DpLayout


def expert_parallel_args(enable_expert_parallel: bool) -> list[str]:
    """The expert-parallel flag of every node: experts whole on each GPU of a MoE layer."""
    return ["--enable-expert-parallel"] if enable_expert_parallel else []


def dp_args(layout: DpLayout, node: str) -> list[str]:
    """The data-parallel arguments of `node`, in a stable order."""
    req = layout.request
    me = layout.of(node)
    dp = str(req.data_parallel_size)
    address = ["--data-parallel-address", layout.head_address]
    rpc = ["--data-parallel-rpc-port", str(req.rpc_port)]
    args: list[str] = []
    if layout.mode == "ranks":
        if not me.head:
            args.append("--headless")
        args += ["--data-parallel-size", dp, "--data-parallel-size-local", str(me.local_size)]
        if not me.head:
            args += ["--data-parallel-start-rank", str(me.start_rank)]
        args += [*address, *rpc]
    else:
        if not me.head:
            args.append("--headless")
        args += [
            "--data-parallel-size",
            dp,
            "--nnodes",
            str(len(layout.nodes)),
            "--node-rank",
            str(me.node_rank),
            "--master-addr",
            layout.head_address,
            "--master-port",
            str(req.master_port),
            *address,
            *rpc,
        ]
    return args + expert_parallel_args(req.enable_expert_parallel)
