"""Data-parallel layouts over several nodes and each node's `vllm serve` arguments.

The expected argument lists are written out by hand, never computed by the code under
test. The `ranks` cases follow vLLM's data parallel deployment guide
(https://docs.vllm.ai/en/latest/serving/data_parallel_deployment.html, "Internal Load
Balancing": "This will run DP=4 with DP ranks 0 and 1 on the head node and ranks 2 and 3
on the second node"):

    # Node 0  (with ip address 10.99.48.128)
    vllm serve $MODEL --data-parallel-size 4 --data-parallel-size-local 2 \\
                      --data-parallel-address 10.99.48.128 --data-parallel-rpc-port 13345
    # Node 1
    vllm serve $MODEL --headless --data-parallel-size 4 --data-parallel-size-local 2 \\
                      --data-parallel-start-rank 2 \\
                      --data-parallel-address 10.99.48.128 --data-parallel-rpc-port 13345

and its note that `--enable-expert-parallel` goes "on all nodes in the multi-node case".
The `nnodes` case (a DP rank larger than a node) follows vLLM 0.32's
EngineArgs.create_engine_config, which infers a node's DP rank as
node_rank x (world_size / nnodes) // (TP x PP), and run_headless, which runs only workers
on a node whose node_rank_within_dp is not 0.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from deskside.engine.dp_args import dp_args
from deskside.planner.data_parallel import DpLayout, DpNode, DpRequest, dp_layout

HEAD = "10.99.48.128"
RPC = 13345


def spark_pair() -> list[DpNode]:
    """Two DGX Sparks, one GB10 each, reached over their RoCE addresses."""
    return [DpNode("spark-a", "192.168.100.1", 1), DpNode("spark-b", "192.168.100.2", 1)]


def nodes(count: int, gpus: int) -> list[DpNode]:
    return [DpNode(f"n{i}", HEAD if i == 0 else f"10.99.48.{129 + i}", gpus) for i in range(count)]


def layout_ok(layout: DpLayout) -> DpLayout:
    assert layout.problems == (), layout.problems
    return layout


def test_flagship_like_two_sparks_dp2_tp1_expert_parallel() -> None:
    req = DpRequest(
        tensor_parallel_size=1,
        pipeline_parallel_size=1,
        data_parallel_size=2,
        enable_expert_parallel=True,
        is_moe=True,
        rpc_port=RPC,
    )
    layout = layout_ok(dp_layout(spark_pair(), req))
    assert layout.mode == "ranks"
    assert dp_args(layout, "spark-a") == [
        "--data-parallel-size", "2",
        "--data-parallel-size-local", "1",
        "--data-parallel-address", "192.168.100.1",
        "--data-parallel-rpc-port", "13345",
        "--enable-expert-parallel",
    ]  # fmt: skip
    assert dp_args(layout, "spark-b") == [
        "--headless",
        "--data-parallel-size", "2",
        "--data-parallel-size-local", "1",
        "--data-parallel-start-rank", "1",
        "--data-parallel-address", "192.168.100.1",
        "--data-parallel-rpc-port", "13345",
        "--enable-expert-parallel",
    ]  # fmt: skip
    a, b = layout.nodes
    assert (a.head, a.start_rank, a.local_size) == (True, 0, 1)
    assert (b.head, b.start_rank, b.local_size) == (False, 1, 1)
    assert a.ports == (8000, RPC) and b.ports == ()
    # experts split over TP x DP = 2 GPUs, each GB10 holding half of them
    assert (layout.moe_group_size, layout.expert_parallel_size) == (2, 2)


def test_the_guides_dp4_over_two_nodes() -> None:
    req = DpRequest(
        tensor_parallel_size=1,
        pipeline_parallel_size=1,
        data_parallel_size=4,
        data_parallel_size_local=2,
        is_moe=True,
        rpc_port=RPC,
    )
    layout = layout_ok(dp_layout(nodes(2, 2), req))
    assert dp_args(layout, "n0") == [
        "--data-parallel-size", "4", "--data-parallel-size-local", "2",
        "--data-parallel-address", HEAD, "--data-parallel-rpc-port", "13345",
    ]  # fmt: skip
    assert dp_args(layout, "n1") == [
        "--headless", "--data-parallel-size", "4", "--data-parallel-size-local", "2",
        "--data-parallel-start-rank", "2",
        "--data-parallel-address", HEAD, "--data-parallel-rpc-port", "13345",
    ]  # fmt: skip
    assert layout.expert_parallel_size == 1 and layout.moe_group_size == 4


def test_four_nodes_of_two_gpus_dp4_tp2() -> None:
    """The guide's layout with one DP rank of TP=2 per node (its DP=4 x TP=2, split over
    four nodes instead of one 8-GPU node)."""
    req = DpRequest(
        tensor_parallel_size=2, pipeline_parallel_size=1, data_parallel_size=4, is_moe=True
    )
    layout = layout_ok(dp_layout(nodes(4, 2), req))
    assert dp_args(layout, "n0") == [
        "--data-parallel-size", "4", "--data-parallel-size-local", "1",
        "--data-parallel-address", HEAD, "--data-parallel-rpc-port", "29550",
    ]  # fmt: skip
    for i in (1, 2, 3):
        assert dp_args(layout, f"n{i}") == [
            "--headless", "--data-parallel-size", "4", "--data-parallel-size-local", "1",
            "--data-parallel-start-rank", str(i),
            "--data-parallel-address", HEAD, "--data-parallel-rpc-port", "29550",
        ]  # fmt: skip


def test_four_single_gpu_nodes_dp2_tp2_spans_nodes() -> None:
    """Four GB10-like nodes, DP=2 x TP=2: a DP rank needs two nodes, so every node runs
    with --nnodes 4 and its node rank; vLLM infers DP ranks 0, 0, 1, 1 and runs the
    engine cores on nodes 0 and 2 (nodes 1 and 3 run TP workers only)."""
    req = DpRequest(
        tensor_parallel_size=2,
        pipeline_parallel_size=1,
        data_parallel_size=2,
        enable_expert_parallel=True,
        is_moe=True,
        rpc_port=RPC,
        master_port=29501,
    )
    layout = layout_ok(dp_layout(nodes(4, 1), req))
    assert layout.mode == "nnodes"
    assert dp_args(layout, "n0") == [
        "--data-parallel-size", "2", "--nnodes", "4", "--node-rank", "0",
        "--master-addr", HEAD, "--master-port", "29501",
        "--data-parallel-address", HEAD, "--data-parallel-rpc-port", "13345",
        "--enable-expert-parallel",
    ]  # fmt: skip
    for i in (1, 2, 3):
        assert dp_args(layout, f"n{i}") == [
            "--headless",
            "--data-parallel-size", "2", "--nnodes", "4", "--node-rank", str(i),
            "--master-addr", HEAD, "--master-port", "29501",
            "--data-parallel-address", HEAD, "--data-parallel-rpc-port", "13345",
            "--enable-expert-parallel",
        ]  # fmt: skip
    assert [(n.start_rank, n.local_size) for n in layout.nodes] == [(0, 1), (0, 0), (1, 1), (1, 0)]
    assert layout.of("n0").ports == (8000, RPC, 29501)
    assert layout.expert_parallel_size == 4


@pytest.mark.parametrize(
    ("cluster", "req", "field", "words"),
    [
        # DP x TP x PP differs from the GPUs: 4 ranks on 2 single-GPU nodes
        (
            nodes(2, 1),
            DpRequest(1, 1, 4, is_moe=True),
            "node n0",
            "needs 2",
        ),
        # DP=2 x TP=2 = 4 GPUs over two single-GPU nodes
        (nodes(2, 1), DpRequest(2, 1, 2, is_moe=True), "node n0", "puts 2 on each node"),
        # local size x nodes is not DP
        (
            nodes(2, 2),
            DpRequest(1, 1, 2, data_parallel_size_local=2, is_moe=True),
            "engine.data_parallel_size_local 2 x 2 nodes",
            "data_parallel_size is 2",
        ),
        # DP that does not split over the nodes
        (nodes(2, 1), DpRequest(1, 1, 3, is_moe=True), "engine.data_parallel_size 3", "evenly"),
        # expert parallel on a dense model
        (
            spark_pair(),
            DpRequest(1, 1, 2, enable_expert_parallel=True, is_moe=False),
            "engine.enable_expert_parallel",
            "not MoE",
        ),
        # a DP rank larger than a node, with several local ranks
        (
            nodes(4, 1),
            DpRequest(2, 1, 2, data_parallel_size_local=2, is_moe=True),
            "engine.data_parallel_size_local is 2",
            "spans several nodes",
        ),
        # the DP RPC port is the API port
        (
            spark_pair(),
            DpRequest(1, 1, 2, is_moe=True, rpc_port=8000),
            "engine.data_parallel_rpc_port and engine.port",
            "both 8000",
        ),
        # the torch.distributed port is the DP RPC port
        (
            nodes(4, 1),
            DpRequest(2, 1, 2, is_moe=True, rpc_port=29500, master_port=29500),
            "cluster.fabric.master_port and engine.data_parallel_rpc_port",
            "both 29500",
        ),
        (spark_pair(), DpRequest(1, 1, 2, is_moe=True, rpc_port=70000), "rpc_port", "65535"),
        # one DP rank is no data-parallel deployment
        (spark_pair(), DpRequest(2, 1, 1, is_moe=True), "engine.data_parallel_size is 1", ""),
        # replicas of different GPU counts when a rank spans nodes
        (
            [DpNode("a", HEAD, 2), DpNode("b", "h2", 1), DpNode("c", "h3", 1)],
            DpRequest(2, 1, 2, is_moe=True),
            "different GPU counts",
            "a: 2",
        ),
    ],
)
def test_layouts_vllm_refuses(
    cluster: list[DpNode], req: DpRequest, field: str, words: str
) -> None:
    layout = dp_layout(cluster, req)
    assert not layout.ok
    assert any(field in str(p) and words in str(p) for p in layout.problems), layout.problems


def test_dense_model_dp_is_noted_not_refused() -> None:
    layout = layout_ok(dp_layout(spark_pair(), DpRequest(1, 1, 2, is_moe=False)))
    assert any("independent replicas" in n for n in layout.notes)
    assert "--enable-expert-parallel" not in dp_args(layout, "spark-b")


def test_head_never_gets_a_start_rank() -> None:
    """A start rank on a node that is not headless switches vLLM to hybrid load balancing
    (EngineArgs.create_engine_config), which deskside does not deploy."""
    layout = layout_ok(dp_layout(nodes(2, 2), DpRequest(1, 1, 4, is_moe=True)))
    assert "--data-parallel-start-rank" not in dp_args(layout, "n0")
    assert "--headless" not in dp_args(layout, "n0")


def test_modules_are_pure() -> None:
    src = Path(__file__).parents[2] / "src" / "deskside"
    for path in (src / "planner" / "data_parallel.py", src / "engine" / "dp_args.py"):
        tree = ast.parse(path.read_text())
        names = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
        }
        assert names <= {"__future__", "dataclasses", "typing", "deskside.planner.data_parallel"}
