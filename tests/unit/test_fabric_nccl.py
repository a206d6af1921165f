"""NCCL/Gloo environment per node for roce, socket and loopback, and how it reaches the
engine's launch (engine.launch.launches)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deskside.engine.launch import Site, launches
from deskside.errors import UsageError
from deskside.fabric.nccl import (
    GID_INDEX_VAR,
    fabric_envs,
    nccl_hca_value,
    node_fabric_env,
)
from deskside.planner.inputs import plan_recipe
from deskside.recipe.load import load_recipe, load_recipe_text
from deskside.recipe.types import Recipe

ROOT = Path(__file__).parents[2]
FLAGSHIP = ROOT / "recipes" / "dual-spark-deepseek-v4-flash.yaml"
LOCAL = ROOT / "recipes" / "local-tiny.yaml"


def flagship(replace: dict[str, str] | None = None) -> Recipe:
    text = FLAGSHIP.read_text()
    for old, new in (replace or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    return load_recipe_text(text, str(FLAGSHIP))


def test_roce_is_the_seeds_environment() -> None:
    recipe = flagship()
    fe = node_fabric_env(recipe, recipe.head, gid_index=7)
    assert fe.env == {
        "NCCL_NET": "IB",
        "NCCL_IB_DISABLE": "0",
        "NCCL_IB_HCA": "=rocep1s0f0",
        "NCCL_IB_GID_INDEX": "7",
        "NCCL_IB_ROCE_VERSION_NUM": "2",
        "NCCL_IB_ADDR_FAMILY": "AF_INET",
        "NCCL_IGNORE_CPU_AFFINITY": "1",
        "NCCL_SOCKET_IFNAME": "enp1s0f0np0",
        "GLOO_SOCKET_IFNAME": "enp1s0f0np0",
    }
    assert not fe.gid_index_at_launch and fe.warnings == ()


def test_roce_without_an_index_leaves_it_to_the_launch_script() -> None:
    """Never an empty NCCL_IB_GID_INDEX (NCCL reads "" as 0, a link-local GID)."""
    recipe = flagship()
    for node in recipe.cluster.nodes:
        fe = node_fabric_env(recipe, node)
        assert GID_INDEX_VAR not in fe.env
        assert fe.gid_index_at_launch


def test_index_0_is_allowed_when_resolved_and_bad_values_are_refused() -> None:
    recipe = flagship()
    assert node_fabric_env(recipe, recipe.head, 0).env[GID_INDEX_VAR] == "0"
    with pytest.raises(UsageError):
        node_fabric_env(recipe, recipe.head, -1)
    with pytest.raises(UsageError):
        node_fabric_env(recipe, recipe.head, True)


def test_per_node_indexes_reach_the_launch_plan() -> None:
    """The seed's head 7 / worker 3, through engine.launch.launches."""
    recipe = flagship()
    site = Site.deployed(recipe, FLAGSHIP)
    found = launches(recipe, plan_recipe(recipe, FLAGSHIP), site, {"ai1": 7, "ai2": 3})
    env = {launch.node: dict(launch.env) for launch in found}
    assert not any(launch.gid_at_launch for launch in found)
    assert env["ai1"][GID_INDEX_VAR] == "7" and env["ai2"][GID_INDEX_VAR] == "3"
    assert env["ai1"]["NCCL_NET"] == "IB" and env["ai2"]["NCCL_IB_HCA"] == "=rocep1s0f0"
    assert env["ai1"]["VLLM_HOST_IP"] == "192.168.100.1"


def test_hardcoded_gid_index_in_the_recipe_warns() -> None:
    recipe = flagship(
        {
            'NCCL_IGNORE_CPU_AFFINITY: "1"': 'NCCL_IGNORE_CPU_AFFINITY: "1"\n'
            '      NCCL_IB_GID_INDEX: "3"'
        }
    )
    fe = node_fabric_env(recipe, recipe.head)
    assert any("hardcodes NCCL_IB_GID_INDEX='3'" in w for w in fe.warnings)


def test_socket_fallback_warns_about_bandwidth_on_gpu() -> None:
    recipe = flagship({"transport: roce": "transport: socket"})
    fe = node_fabric_env(recipe, recipe.head)
    assert fe.env == {
        "NCCL_NET": "Socket",
        "NCCL_IB_DISABLE": "1",
        "NCCL_SOCKET_IFNAME": "enp1s0f0np0",
        "GLOO_SOCKET_IFNAME": "enp1s0f0np0",
    }
    assert not fe.gid_index_at_launch
    (warning,) = fe.warnings
    assert "giving up the RDMA bandwidth" in warning and "20x" in warning


def test_socket_on_cpu_engines_does_not_warn() -> None:
    recipe = load_recipe(LOCAL)
    envs = fabric_envs(recipe)
    assert set(envs) == {"node0", "node1"}
    assert envs["node0"].env["GLOO_SOCKET_IFNAME"] == "ds-veth0"
    assert envs["node1"].env["NCCL_SOCKET_IFNAME"] == "ds-veth1"
    assert all(e.warnings == () for e in envs.values())


def test_loopback() -> None:
    recipe = flagship({"transport: roce": "transport: loopback"})
    fe = node_fabric_env(recipe, recipe.head)
    assert fe.env["NCCL_SOCKET_IFNAME"] == "lo" and fe.env["GLOO_SOCKET_IFNAME"] == "lo"
    assert fe.env["NCCL_IB_DISABLE"] == "1"
    assert any("cannot reach 'lo'" in w for w in fe.warnings)  # two nodes on loopback


def test_contradicting_nccl_net_warns() -> None:
    recipe = flagship(
        {'NCCL_IGNORE_CPU_AFFINITY: "1"': 'NCCL_IGNORE_CPU_AFFINITY: "1"\n      NCCL_NET: Socket'}
    )
    fe = node_fabric_env(recipe, recipe.head)
    assert any("contradicting transport 'roce'" in w for w in fe.warnings)


def test_hca_value_is_exact_match() -> None:
    assert nccl_hca_value(["mlx5_1"]) == "=mlx5_1"
    assert nccl_hca_value(["mlx5_0:1", "mlx5_1:1"]) == "=mlx5_0:1,mlx5_1:1"
