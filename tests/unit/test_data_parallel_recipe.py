"""Data parallelism asked for by a recipe, through the pure core: the recipe's rules, each
node's launch and the planner's weights per GPU.

Expected values are written out by hand from vLLM's rules, never computed by the code
under test:

- launches follow vLLM's data parallel deployment guide (the head: `--data-parallel-size D
  --data-parallel-size-local L --data-parallel-address HEAD --data-parallel-rpc-port P`;
  every other node the same with `--headless` and `--data-parallel-start-rank S`), and,
  when one DP rank spans nodes, EngineArgs.create_engine_config's `--nnodes` inference;
- weights per GPU follow FusedMoEParallelConfig.make (routed experts over TP x DP GPUs,
  whole ones with expert parallel, determine_expert_map giving the first GPUs
  ceil(E / (TP x DP))) and ParallelConfig.use_sequence_parallel_moe (DeepSeek's shared
  experts unsplit with expert parallel, TP > 1 and DP > 1).
"""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from ruamel.yaml import YAML

from deskside.engine.launch import Site, launch_of, launches
from deskside.errors import RecipeError, UsageError
from deskside.hardware import get_profile
from deskside.planner.inputs import plan_recipe
from deskside.planner.plan import PlanInput, plan
from deskside.planner.rank_weights import Split, rank_weight_bytes
from deskside.planner.registry import read_arch
from deskside.planner.types import EngineRequest, ModelArch, MoEShape, ParamCounts
from deskside.recipe.load import load_recipe, load_recipe_text
from deskside.recipe.types import Recipe

ROOT = Path(__file__).parents[2]
DP_EP = ROOT / "recipes" / "dual-spark-dp-ep.yaml"
FLAGSHIP = ROOT / "recipes" / "dual-spark-deepseek-v4-flash.yaml"
CONFIG = ROOT / "recipes" / "dual-spark-deepseek-v4-flash" / "config.json"


def dp_ep_data() -> dict[str, Any]:
    data: dict[str, Any] = YAML(typ="safe").load(DP_EP.read_text())
    return data


def recipe_text(data: dict[str, Any]) -> str:
    out = StringIO()
    YAML().dump(data, out)
    return out.getvalue()


def load(data: dict[str, Any]) -> Recipe:
    return load_recipe_text(recipe_text(data), str(DP_EP))


def refused(data: dict[str, Any]) -> RecipeError:
    with pytest.raises(RecipeError) as info:
        load(data)
    return info.value


def found(err: RecipeError, field: str, words: str) -> RecipeError:
    """The problem of `err` at `field` (dotted path) whose message or hint has `words`."""
    for p in err.problems:
        at = p.location is not None and p.location.field == field
        if at and words in f"{p.message}\n{p.hint or ''}":
            assert p.hint, p.message
            return p
    shown = [(p.location.field if p.location else None, p.message) for p in err.problems]
    raise AssertionError(f"no problem at {field} with {words!r}: {shown}")


def nodes(count: int, gpus: int) -> list[dict[str, Any]]:
    out = []
    for i in range(count):
        out.append(
            {
                "name": f"n{i}",
                "address": f"10.0.0.{i + 1}",
                "role": "head" if i == 0 else "worker",
                "hardware": "gb10",
                "gpus": gpus,
                "fabric": {
                    "interface": "eth1",
                    "address": f"192.168.7.{i + 1}",
                    "hcas": ["rocep1s0f0"],
                },
            }
        )
    return out


def with_nodes(count: int, gpus: int, **engine: Any) -> dict[str, Any]:
    data = dp_ep_data()
    data["cluster"]["nodes"] = nodes(count, gpus)
    data["engine"]["nnodes"] = count
    data["engine"].update(engine)
    return data


# --------------------------------------------------------------------------- recipe rules


def test_the_shipped_recipe_loads_with_its_sizes() -> None:
    recipe = load_recipe(DP_EP)
    e = recipe.engine
    assert (e.data_parallel_size, e.tensor_parallel_size, e.pipeline_parallel_size) == (2, 1, 1)
    assert e.enable_expert_parallel and e.data_parallel_size_local is None
    assert e.data_parallel_rpc_port == 29550


def test_defaults_keep_one_engine() -> None:
    e = load_recipe(FLAGSHIP).engine
    assert (e.data_parallel_size, e.data_parallel_size_local) == (1, None)
    assert not e.enable_expert_parallel and e.data_parallel_rpc_port == 29550


def test_dp_times_tp_must_equal_the_gpus() -> None:
    data = dp_ep_data()
    data["engine"]["tensor_parallel_size"] = 2  # 2 x 2 x 1 = 4 ranks on 2 GPUs
    err = refused(data)
    found(err, "engine.tensor_parallel_size", "data_parallel_size × tensor_parallel_size")
    found(err, "engine.tensor_parallel_size", "= 2 × 2 × 1 = 4 engine ranks")
    # said once, not again per node
    assert not any(p.location and "gpus" in (p.location.field or "") for p in err.problems)


def test_local_size_that_does_not_cover_the_ranks() -> None:
    # two nodes of one GPU: 2 local ranks x 2 nodes = 4 ranks, but DP is 2
    data = dp_ep_data()
    data["engine"]["data_parallel_size_local"] = 2
    err = refused(data)
    found(err, "engine.data_parallel_size_local", "2 x 2 nodes = 4 ranks")
    found(err, "cluster.nodes[0].gpus", "needs 2")


def test_local_size_without_data_parallelism() -> None:
    data = dp_ep_data()
    data["engine"].update(data_parallel_size=1, tensor_parallel_size=2)
    data["engine"]["data_parallel_size_local"] = 1
    found(refused(data), "engine.data_parallel_size_local", "only with data_parallel_size")


def test_dp_that_does_not_split_over_the_nodes() -> None:
    # 3 ranks on a node of 2 GPUs and one of 1: 3 GPUs in all, but not 3 / 2 per node
    data = dp_ep_data()
    data["cluster"]["nodes"][0]["gpus"] = 2
    data["engine"]["data_parallel_size"] = 3
    err = refused(data)
    found(err, "engine.data_parallel_size", "does not split evenly over 2 nodes")
    found(err, "cluster.nodes[0].gpus", "has 2 GPUs")


def test_rpc_port_clashes_with_the_api_and_the_proxy() -> None:
    data = dp_ep_data()
    data["engine"]["data_parallel_rpc_port"] = 8888
    found(refused(data), "engine.data_parallel_rpc_port", "already used by engine.port")
    data["engine"]["data_parallel_rpc_port"] = 4000
    found(refused(data), "proxy.port", "already used by engine.data_parallel_rpc_port")


@pytest.mark.parametrize("port", [0, 65536, -1])
def test_rpc_port_out_of_range(port: int) -> None:
    data = dp_ep_data()
    data["engine"]["data_parallel_rpc_port"] = port
    err = refused(data)
    assert any(p.location and p.location.field == "engine.data_parallel_rpc_port"
               for p in err.problems)  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value"),
    [("data_parallel_size", 0), ("data_parallel_size", "2"), ("data_parallel_size_local", 0),
     ("enable_expert_parallel", "yes"), ("data_parallel_size", 2.0)],
)  # fmt: skip
def test_hostile_values_are_refused_at_their_key(field: str, value: object) -> None:
    data = dp_ep_data()
    data["engine"][field] = value
    err = refused(data)
    assert any(p.location and p.location.field == f"engine.{field}" for p in err.problems)


@pytest.mark.parametrize(
    "arg", ["--data-parallel-size=2", "-dp", "--data-parallel-start-rank", "-dpa",
            "--data-parallel-rpc-port", "--enable-expert-parallel", "-ep",
            "--data_parallel_size_local=1"],
)  # fmt: skip
def test_data_parallel_flags_are_refused_in_extra_args(arg: str) -> None:
    data = dp_ep_data()
    data["engine"]["extra_args"] = [arg]
    found(refused(data), "engine.extra_args[0]", "set by deskside")


def test_data_parallelism_needs_the_multiprocessing_backend() -> None:
    data = dp_ep_data()
    data["engine"]["distributed_executor_backend"] = "ray"
    found(refused(data), "engine.distributed_executor_backend", "distributed_executor_backend: mp")


def test_a_rank_spanning_nodes_with_several_local_ranks() -> None:
    data = with_nodes(4, 1, tensor_parallel_size=2, data_parallel_size_local=2)
    found(refused(data), "engine.data_parallel_size_local", "spans several nodes")


def test_python_callers_see_a_validation_error() -> None:
    data = dp_ep_data()
    data["engine"]["data_parallel_size_local"] = 2
    with pytest.raises(ValidationError):
        Recipe.model_validate(data)


# --------------------------------------------------------------------------- launches


def node_launches(recipe: Recipe) -> dict[str, tuple[str, ...]]:
    found_ = launches(recipe, plan_recipe(recipe, DP_EP), Site.deployed(recipe, DP_EP))
    return {la.node: la.args for la in found_}


def tail(args: tuple[str, ...]) -> list[str]:
    """What follows the arguments every node shares (the last of them in this recipe)."""
    return list(args[args.index("--enable-prompt-tokens-details") + 1 :])


def test_the_shipped_recipe_launches_like_the_guide() -> None:
    recipe = load_recipe(DP_EP)
    plan_ = plan_recipe(recipe, DP_EP)
    found_ = launches(recipe, plan_, Site.deployed(recipe, DP_EP))
    assert [la.node for la in found_] == ["ai2", "ai1"]  # workers first, the head last
    head, worker = launch_of(found_, "ai1"), launch_of(found_, "ai2")
    assert tail(head.args) == [
        "--data-parallel-size", "2", "--data-parallel-size-local", "1",
        "--data-parallel-address", "192.168.100.1", "--data-parallel-rpc-port", "29550",
        "--enable-expert-parallel",
        "--host", "192.168.0.27", "--port", "8888", "--enable-server-load-tracking",
    ]  # fmt: skip
    assert tail(worker.args) == [
        "--headless",
        "--data-parallel-size", "2", "--data-parallel-size-local", "1",
        "--data-parallel-start-rank", "1",
        "--data-parallel-address", "192.168.100.1", "--data-parallel-rpc-port", "29550",
        "--enable-expert-parallel",
    ]  # fmt: skip
    assert head.args[head.args.index("--tensor-parallel-size") + 1] == "1"
    for la in found_:
        assert "--nnodes" not in la.args and "--node-rank" not in la.args
        assert la.args.count("--enable-expert-parallel") == 1
    assert head.probe_url == "http://192.168.0.27:8888" and worker.probe_url is None
    assert head.ports == (8888, 29550) and worker.ports == ()


def test_the_guides_dp4_two_ranks_per_node() -> None:
    recipe = load(with_nodes(2, 2, data_parallel_size=4, data_parallel_rpc_port=13345))
    args = node_launches(recipe)
    assert tail(args["n0"]) == [
        "--data-parallel-size", "4", "--data-parallel-size-local", "2",
        "--data-parallel-address", "192.168.7.1", "--data-parallel-rpc-port", "13345",
        "--enable-expert-parallel",
        "--host", "10.0.0.1", "--port", "8888", "--enable-server-load-tracking",
    ]  # fmt: skip
    assert tail(args["n1"]) == [
        "--headless",
        "--data-parallel-size", "4", "--data-parallel-size-local", "2",
        "--data-parallel-start-rank", "2",
        "--data-parallel-address", "192.168.7.1", "--data-parallel-rpc-port", "13345",
        "--enable-expert-parallel",
    ]  # fmt: skip


def test_a_rank_spanning_two_nodes_uses_the_nnodes_launch() -> None:
    """Four single-GPU nodes, DP=2 x TP=2: vLLM infers DP ranks 0, 0, 1, 1 from
    --node-rank (create_engine_config); the torch.distributed port is the fabric's."""
    data = with_nodes(4, 1, tensor_parallel_size=2)
    data["engine"]["max_model_len"] = 65536
    recipe = load(data)
    args = node_launches(recipe)
    for i in range(4):
        assert tail(args[f"n{i}"]) == [
            *(["--headless"] if i else []),
            "--data-parallel-size", "2", "--nnodes", "4", "--node-rank", str(i),
            "--master-addr", "192.168.7.1", "--master-port", "25000",
            "--data-parallel-address", "192.168.7.1", "--data-parallel-rpc-port", "29550",
            "--enable-expert-parallel",
            *(["--host", "10.0.0.1", "--port", "8888"] if i == 0 else []),
            *(["--enable-server-load-tracking"] if i == 0 else []),
        ]  # fmt: skip
    found_ = launches(recipe, plan_recipe(recipe, DP_EP), Site.deployed(recipe, DP_EP))
    assert launch_of(found_, "n0").ports == (8888, 29550, 25000)


def test_expert_parallel_without_data_parallelism() -> None:
    """TP=2 with expert parallel: the tensor-parallel launch, plus the flag on each node."""
    data = dp_ep_data()
    data["engine"].update(data_parallel_size=1, tensor_parallel_size=2)
    args = node_launches(load(data))
    assert tail(args["ai1"]) == [
        "--nnodes", "2", "--node-rank", "0", "--master-addr", "192.168.100.1",
        "--master-port", "25000", "--enable-expert-parallel",
        "--host", "192.168.0.27", "--port", "8888", "--enable-server-load-tracking",
    ]  # fmt: skip
    assert tail(args["ai2"]) == [
        "--nnodes", "2", "--node-rank", "1", "--master-addr", "192.168.100.1",
        "--master-port", "25000", "--enable-expert-parallel", "--headless",
    ]  # fmt: skip


# --------------------------------------------------------------------------- planner

# A bf16 MoE model small enough to add up by hand: 2 bytes per parameter everywhere.
# embedding 200 B, lm_head 200 B, attention 800 B, routed experts 16,000 B (8 experts of
# 2,000 B), shared experts 400 B, router 32 B, norms 8 B; one draft layer: 100 B dense
# + 1,600 B of experts.
PARAMS = ParamCounts(
    embedding=100, lm_head=100, attention=400, dense_mlp=0, experts=8000,
    shared_experts=200, router=16, norms=4, draft_layer=50, draft_layer_experts=800,
)  # fmt: skip


def moe_arch(family: str = "deepseek_v4") -> ModelArch:
    return ModelArch(
        architecture="Test", model_type=family, family=family, hidden_size=8,
        num_hidden_layers=1, num_attention_heads=4, vocab_size=50,
        max_position_embeddings=4096, dtype="bfloat16", layers=(), params=PARAMS,
        active_params=0, weights_format="bf16", moe=MoEShape(8, 1, 2, 4, 1),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("split", "family", "drafts", "expected"),
    [
        # TP=2, no DP: everything but router and norms halved: 17,600 / 2 + 40
        (Split(2, 1), "deepseek_v4", 0, 8840),
        # DP=2 TP=1 EP: 4 of 8 experts (8,000) + non-expert whole (1,600) + 40
        (Split(1, 1, 2, True), "deepseek_v4", 0, 9640),
        # DP=2 TP=1 without EP: each expert halved, the same bytes
        (Split(1, 1, 2, False), "deepseek_v4", 0, 9640),
        # DP=3 EP: ceil(8 / 3) = 3 experts on the first GPU: 6,000 + 1,600 + 40
        (Split(1, 1, 3, True), "deepseek_v4", 0, 7640),
        # DP=3 without EP: 16,000 / 3 = 5,333.3 + 1,640, rounded down
        (Split(1, 1, 3, False), "deepseek_v4", 0, 6973),
        # DP=2 TP=2 EP, DeepSeek: (200 + 200 + 800) / 2 + shared 400 whole + 2 of 8
        # experts (4,000) + 40 (sequence-parallel MoE)
        (Split(2, 1, 2, True), "deepseek_v4", 0, 5040),
        # the same for a family whose shared experts stay tensor-parallel: 400 / 2
        (Split(2, 1, 2, True), "qwen2_moe", 0, 4840),
        # DP=2 EP with one draft layer: + 100 dense whole + 1,600 / 2 of its experts
        (Split(1, 1, 2, True), "deepseek_v4", 1, 10540),
    ],
)
def test_weights_per_gpu(split: Split, family: str, drafts: int, expected: int) -> None:
    assert rank_weight_bytes(moe_arch(family), None, split, drafts, 0) == expected


def test_the_shipped_recipe_plans_experts_over_both_gpus() -> None:
    """DP=2 EP holds half the routed experts and all the rest on each GB10; the TP=2
    flagship halves everything but routers and norms. Both from the same part sizes."""
    from deskside.planner.types import weight_bytes_by_part

    dp_plan = plan_recipe(load_recipe(DP_EP), DP_EP)
    assert [(r.rank, r.node, r.data_parallel_rank) for r in dp_plan.ranks] == [
        (0, "ai1", 0),
        (1, "ai2", 1),
    ]
    assert dp_plan.engine["data_parallel_size"] == 2 and dp_plan.engine["enable_expert_parallel"]
    arch = read_arch(
        YAML(typ="safe").load(
            (FLAGSHIP.parent / "dual-spark-deepseek-v4-flash/config.json").read_text()
        )
    )
    parts = weight_bytes_by_part(arch, None, 3)  # DSpark loads 3 draft layers
    # DeepSeek-V4-Flash: 256 routed experts, 128 on each GPU; a draft layer's 256 experts
    # in MXFP4 (0.5 + 1/32 bytes per parameter)
    draft_experts = 3 * arch.params.draft_layer_experts * (0.5 + 1 / 32)
    replicated = parts["router"] + parts["norms"]
    experts = parts["experts"] + draft_experts
    rest = sum(parts.values()) - replicated - experts
    assert dp_plan.weights_bytes == int(rest + experts * 128 / 256 + replicated)
    assert any("data parallel: 2 engines" in a for a in dp_plan.assumptions)


def dense_request(**kw: Any) -> PlanInput:
    arch = read_arch(
        {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
         "vocab_size": 1000, "max_position_embeddings": 4096, "num_hidden_layers": 2}
    )  # fmt: skip
    hw = get_profile("h100-80gb")
    return PlanInput(arch=arch, request=EngineRequest(**kw), hardware=hw)


def test_expert_parallel_on_a_dense_model_is_refused() -> None:
    with pytest.raises(UsageError) as info:
        plan(dense_request(data_parallel_size=2, enable_expert_parallel=True))
    # ModelConfig._verify_with_expert_parallelism, word for word
    assert "Number of experts in the model must be greater than 0" in info.value.message
    assert "enable_expert_parallel: false" in (info.value.hint or "")


def test_data_parallel_dense_model_is_a_warning() -> None:
    p = plan(dense_request(data_parallel_size=2))
    assert any("independent replicas" in w for w in p.warnings)
    assert len(p.ranks) == 2 and [r.data_parallel_rank for r in p.ranks] == [0, 1]
    assert p.ranks[0].weights_bytes == p.ranks[1].weights_bytes
