"""The cross-field rules on their own: each returns its problems at the key to fix."""

from __future__ import annotations

from deskside.recipe.rules import (
    alias_problems,
    container_image_problems,
    device_problems,
    draft_model_problems,
    flag_name,
    head_port_problems,
    head_problems,
    kv_cache_problems,
    managed_flag_problems,
    model_source_problems,
    netns_problems,
    rank_problems,
    roce_problems,
    unique_node_problems,
)
from deskside.recipe.types import Node, NodeFabric, Ssh

PINNED = "vllm/vllm-openai:v0.32.0@sha256:" + "ab" * 32


def node(name: str, address: str, role: str = "worker", **more: object) -> Node:
    return Node.model_validate(
        {"name": name, "address": address, "role": role, "hardware": "cpu", **more}
    )


def test_flag_name_normalises_underscores_and_drops_the_value() -> None:
    assert flag_name("--max_model_len=8192") == "--max-model-len"
    assert flag_name("--tool-call-parser") == "--tool-call-parser"
    assert flag_name("-tp") == "-tp"


def test_managed_flags_are_refused_at_their_item() -> None:
    problems = managed_flag_problems(["--tool-call-parser", "deepseek_v4", "--max_model_len=8"])
    assert [p.loc for p in problems] == [("extra_args", 2)]
    assert problems[0].message == "--max-model-len is set by deskside from engine.max_model_len"
    assert managed_flag_problems(["--tool-call-parser", "deepseek_v4"]) == []


def test_kv_cache_is_sized_one_way_and_exactly_on_cpu() -> None:
    both = kv_cache_problems(device="gpu", gpu_memory_utilization=0.8, kv_cache_memory=1024)
    assert [p.loc for p in both] == [("kv_cache_memory",)]
    cpu = kv_cache_problems(device="cpu", gpu_memory_utilization=None, kv_cache_memory=None)
    assert [p.loc for p in cpu] == [("device",)]
    assert kv_cache_problems(device="cpu", gpu_memory_utilization=None, kv_cache_memory=1) == []


def test_model_source_and_aliases() -> None:
    both = model_source_problems(repo="a/b", revision="0" * 40, path="./m")
    assert [p.loc for p in both] == [("path",)]
    neither = model_source_problems(repo=None, revision=None, path=None)
    assert [p.loc for p in neither] == [()]
    unpinned = model_source_problems(repo="a/b", revision=None, path=None)
    assert [p.loc for p in unpinned] == [("repo",)]
    stray = model_source_problems(repo=None, revision="0" * 40, path="./m")
    assert [p.loc for p in stray] == [("revision",)]
    aliases = alias_problems("tiny", ["small", "tiny", "small"])
    assert [(p.loc, p.message) for p in aliases] == [
        (("aliases", 1), "alias 'tiny' is the served_name already"),
        (("aliases", 2), "alias 'small' is listed twice"),
    ]


def test_draft_model_methods_need_a_model() -> None:
    assert [p.loc for p in draft_model_problems(method="eagle3", model=None)] == [("method",)]
    assert draft_model_problems(method="eagle3", model="org/draft") == []
    assert draft_model_problems(method="mtp", model=None) == []


def test_exactly_one_head() -> None:
    workers = [node("a", "10.0.0.1"), node("b", "10.0.0.2")]
    assert [p.loc for p in head_problems(workers)] == [("cluster", "nodes")]
    heads = [node("a", "10.0.0.1", "head"), node("b", "10.0.0.2", "head")]
    problems = head_problems(heads)
    assert [p.loc for p in problems] == [("cluster", "nodes", 1, "role")]
    assert "cluster.nodes[0] ('a') is the head already" in problems[0].message


def test_nodes_need_their_own_names_and_addresses() -> None:
    fabric = {"interface": "eth1", "address": "192.168.100.1"}
    nodes = [
        node("a", "10.0.0.1", "head", fabric=fabric),
        node("a", "10.0.0.1", fabric=fabric),
    ]
    assert [p.loc for p in unique_node_problems(nodes)] == [
        ("cluster", "nodes", 1, "name"),
        ("cluster", "nodes", 1, "address"),
        ("cluster", "nodes", 1, "fabric", "address"),
    ]


def test_hardware_must_run_on_the_engine_device() -> None:
    problems = device_problems([node("a", "10.0.0.1", "head")], device="gpu")
    assert [p.loc for p in problems] == [("cluster", "nodes", 0, "hardware")]
    assert problems[0].hint == "set engine.device: cpu, or pick a gpu hardware profile"


def test_network_namespaces() -> None:
    fabric = NodeFabric.model_validate({"interface": "ds-veth0", "address": "10.9.0.1"})
    nodes = [
        node("a", "10.0.0.1", "head", netns="ds0"),
        node("b", "10.0.0.2", netns="ds0", fabric=fabric, ssh=Ssh()),
    ]
    messages = [(p.loc, p.message) for p in netns_problems(nodes)]
    assert messages == [
        (
            ("cluster", "nodes", 0, "netns"),
            "node 'a' runs in a network namespace but has no fabric interface and address for it",
        ),
        (
            ("cluster", "nodes", 1, "netns"),
            "netns runs the node on this machine; ssh says it is remote",
        ),
        (
            ("cluster", "nodes", 1, "netns"),
            "network namespace 'ds0' is used by cluster.nodes[0] already",
        ),
    ]


def test_roce_needs_rdma_devices_on_every_node() -> None:
    nodes = [
        node("a", "10.0.0.1", "head"),
        node("b", "10.0.0.2", fabric={"interface": "eth1", "address": "10.9.0.2"}),
        node(
            "c",
            "10.0.0.3",
            fabric={"interface": "eth1", "address": "10.9.0.3", "hcas": ["rocep1s0f0"]},
        ),
    ]
    assert roce_problems(nodes, transport="socket") == []
    problems = roce_problems(nodes, transport="roce")
    assert [p.loc for p in problems] == [("cluster", "nodes", 0), ("cluster", "nodes", 1, "fabric")]
    assert all(p.fallback_locs == (("cluster", "fabric", "transport"),) for p in problems)


def test_every_gpu_runs_one_rank_and_nnodes_counts_the_nodes() -> None:
    nodes = [node("a", "10.0.0.1", "head"), node("b", "10.0.0.2")]
    assert rank_problems(nodes, nnodes=2, tensor_parallel_size=2, pipeline_parallel_size=1) == []
    problems = rank_problems(nodes, nnodes=1, tensor_parallel_size=4, pipeline_parallel_size=1)
    assert [p.loc for p in problems] == [("engine", "nnodes"), ("engine", "tensor_parallel_size")]
    assert problems[0].message == "engine.nnodes is 1 but cluster.nodes lists 2 nodes"
    assert "= 4 engine ranks, but the nodes have 1 + 1 = 2 GPUs" in problems[1].message


def test_container_runtime_needs_an_image_pinned_by_digest() -> None:
    assert container_image_problems(runtime_kind="native", image=None) == []
    assert container_image_problems(runtime_kind="container", image=PINNED) == []
    missing = container_image_problems(runtime_kind="container", image=None)
    assert [p.loc for p in missing] == [("runtime", "kind")]
    tagged = container_image_problems(runtime_kind="container", image="vllm/vllm-openai:v0.32.0")
    assert [p.loc for p in tagged] == [("engine", "image")]


def test_head_ports_clash_at_the_later_key() -> None:
    problems = head_port_problems(
        [
            (8000, ("engine", "port")),
            (9090, ("monitoring", "prometheus_port")),
            (8000, ("proxy", "port")),
        ]
    )
    assert [(p.loc, p.message, p.fallback_locs) for p in problems] == [
        (
            ("proxy", "port"),
            "port 8000 is already used by engine.port on the head node",
            (("proxy",),),
        )
    ]
