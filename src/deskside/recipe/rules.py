"""Rules across fields of a recipe: each returns the `Problem`s it finds, at the key to fix.

The models' validators stay thin: they call these functions with their fields and raise
whatever they return together (`raise_problems`). A problem's `loc` is relative to the
model whose validator calls the rule: `Model`, `Speculative` and `Engine` for the rules on
one section, `Recipe` for the rules that look at several sections (those paths start at
the top level: `("cluster", "nodes", 0, "role")`). When the key to fix is absent from the
user's file, `fallback_locs` say where to point instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from ipaddress import IPv4Address

from deskside.hardware import PROFILES
from deskside.recipe.cluster import Node
from deskside.recipe.data_parallel_rules import DATA_PARALLEL_FLAGS
from deskside.recipe.problems import LocPath, Problem
from deskside.recipe.values import REVISION_HINT

# --------------------------------------------------------------------------- model


def model_source_problems(
    *, repo: str | None, revision: str | None, path: str | None
) -> list[Problem]:
    """Exactly one of repo and path; a repo needs a pinned revision, a path has none."""
    problems: list[Problem] = []
    if repo is not None and path is not None:
        problems.append(
            Problem(
                ("path",),
                "give either repo or path, not both",
                "keep repo (+ revision) to download from Hugging Face, or path for a local folder",
            )
        )
    elif repo is None and path is None:
        problems.append(
            Problem(
                (),
                "no model given: set repo (with revision) or path",
                "e.g. repo: deepseek-ai/DeepSeek-V4-Flash-0731 and revision: <commit>, "
                "or path: ./models/my-model",
            )
        )
    if repo is not None and revision is None:
        problems.append(
            Problem(("repo",), "repo needs a pinned revision (a commit hash)", REVISION_HINT)
        )
    if repo is None and revision is not None:
        problems.append(
            Problem(
                ("revision",),
                "revision only applies to a Hugging Face repo",
                "remove revision, or give repo instead of path",
            )
        )
    return problems


def alias_problems(served_name: str, aliases: Sequence[str]) -> list[Problem]:
    """Each alias once, and none repeating served_name."""
    problems: list[Problem] = []
    seen: set[str] = set()
    for index, alias in enumerate(aliases):
        if alias == served_name:
            problems.append(
                Problem(
                    ("aliases", index),
                    f"alias {alias!r} is the served_name already",
                    "remove it from aliases",
                )
            )
        elif alias in seen:
            problems.append(
                Problem(("aliases", index), f"alias {alias!r} is listed twice", "list it once")
            )
        seen.add(alias)
    return problems


# --------------------------------------------------------------------------- speculative

# Proposers that load a separate draft model; vLLM refuses them without one
# (vllm SpeculativeConfig.__post_init__).
NEEDS_DRAFT_MODEL = frozenset({"draft_model", "eagle", "eagle3"})


def draft_model_problems(*, method: str, model: str | None) -> list[Problem]:
    """eagle, eagle3 and draft_model need speculative.model."""
    if method in NEEDS_DRAFT_MODEL and model is None:
        return [
            Problem(
                ("method",),
                f"method {method!r} needs a draft model",
                "set speculative.model to the draft model's repo or path",
            )
        ]
    return []


# --------------------------------------------------------------------------- engine

# vLLM flags deskside derives from recipe fields: setting them in extra_args would make the
# engine disagree with the plan. Maps the flag to the recipe field that controls it.
MANAGED_FLAGS = {
    "--tensor-parallel-size": "engine.tensor_parallel_size",
    "-tp": "engine.tensor_parallel_size",
    "--pipeline-parallel-size": "engine.pipeline_parallel_size",
    "-pp": "engine.pipeline_parallel_size",
    "--nnodes": "engine.nnodes",
    "--node-rank": "the node's place in cluster.nodes (deskside sets it per node)",
    "--master-addr": "the head node's address",
    "--master-port": "cluster.fabric.master_port",
    "--headless": "the node's role (deskside sets it per node)",
    "--host": "engine.host",
    "--port": "engine.port",
    "--served-model-name": "model.served_name and model.aliases",
    "--revision": "model.revision",
    "--max-model-len": "engine.max_model_len",
    "--max-num-seqs": "engine.max_num_seqs",
    "--max-num-batched-tokens": "engine.max_num_batched_tokens",
    "--gpu-memory-utilization": "engine.gpu_memory_utilization",
    "--kv-cache-memory-bytes": "engine.kv_cache_memory",
    "--kv-cache-memory": "engine.kv_cache_memory",
    "--kv-cache-dtype": "engine.kv_cache_dtype",
    "--block-size": "engine.block_size",
    "--speculative-config": "engine.speculative",
    "--enable-prefix-caching": "engine.enable_prefix_caching",
    "--no-enable-prefix-caching": "engine.enable_prefix_caching",
    "--enable-chunked-prefill": "engine.enable_chunked_prefill",
    "--no-enable-chunked-prefill": "engine.enable_chunked_prefill",
    "--async-scheduling": "engine.async_scheduling",
    "--no-async-scheduling": "engine.async_scheduling",
    "--enforce-eager": "engine.enforce_eager",
    "--load-format": "engine.load_format",
    "--dtype": "engine.dtype",
    "--distributed-executor-backend": "engine.distributed_executor_backend",
    **DATA_PARALLEL_FLAGS,
}


def flag_name(arg: str) -> str:
    """The flag of a command-line argument: `--max_model_len=8` -> `--max-model-len`."""
    flag = arg.split("=", 1)[0]
    if flag.startswith("--"):
        return "--" + flag[2:].replace("_", "-")
    return flag


def kv_cache_problems(
    *, device: str, gpu_memory_utilization: float | None, kv_cache_memory: int | None
) -> list[Problem]:
    """One way to size the KV cache, and on CPU the exact size."""
    problems: list[Problem] = []
    if gpu_memory_utilization is not None and kv_cache_memory is not None:
        problems.append(
            Problem(
                ("kv_cache_memory",),
                "set gpu_memory_utilization or kv_cache_memory, not both",
                "kv_cache_memory fixes the KV cache size exactly; gpu_memory_utilization "
                "lets vLLM size it from a memory fraction. Remove one.",
            )
        )
    if device == "cpu" and kv_cache_memory is None:
        problems.append(
            Problem(
                ("device",),
                "device 'cpu' needs kv_cache_memory (vLLM on CPU does not size its KV "
                "cache from a memory fraction)",
                "add e.g. kv_cache_memory: 1GiB under engine",
            )
        )
    return problems


def managed_flag_problems(extra_args: Sequence[str]) -> list[Problem]:
    """extra_args may not set a flag deskside derives from a recipe field."""
    problems: list[Problem] = []
    for index, arg in enumerate(extra_args):
        flag = flag_name(arg)
        if flag in MANAGED_FLAGS:
            problems.append(
                Problem(
                    ("extra_args", index),
                    f"{flag} is set by deskside from {MANAGED_FLAGS[flag]}",
                    f"remove it from extra_args and set {MANAGED_FLAGS[flag]} instead",
                )
            )
    return problems


CPU_KVCACHE_SPACE = "VLLM_CPU_KVCACHE_SPACE"
MAX_CPU_KVCACHE_GIB = 65_536


def cpu_kvcache_space_problems(env: Mapping[str, str]) -> list[Problem]:
    """VLLM_CPU_KVCACHE_SPACE, when set, is a whole number of GiB (vllm.envs reads it with
    int(), so anything else stops the engine at start)."""
    value = env.get(CPU_KVCACHE_SPACE)
    if value is None or (value.isdigit() and int(value) <= MAX_CPU_KVCACHE_GIB):
        return []
    return [
        Problem(
            ("env", CPU_KVCACHE_SPACE),
            f"{CPU_KVCACHE_SPACE} is {value!r}: vLLM reads a whole number of GiB, at most "
            f"{MAX_CPU_KVCACHE_GIB}",
            'write e.g. "4", or remove it and set engine.kv_cache_memory (e.g. 4GiB)',
        )
    ]


# --------------------------------------------------------------------------- recipe


def head_problems(nodes: Sequence[Node]) -> list[Problem]:
    """Exactly one node has role 'head'."""
    problems: list[Problem] = []
    heads = [i for i, node in enumerate(nodes) if node.role == "head"]
    if not heads:
        problems.append(
            Problem(
                ("cluster", "nodes"),
                "no node has role 'head'",
                "set role: head on the node that serves the API (exactly one)",
            )
        )
    for index in heads[1:]:
        problems.append(
            Problem(
                ("cluster", "nodes", index, "role"),
                f"a second head: cluster.nodes[{heads[0]}] ({nodes[heads[0]].name!r}) is "
                "the head already; there must be exactly one",
                "set role: worker here",
            )
        )
    return problems


def unique_node_problems(nodes: Sequence[Node]) -> list[Problem]:
    """Every node has its own name, address and fabric address."""
    problems: list[Problem] = []
    for field in ("name", "address"):
        first: dict[str, int] = {}
        for index, node in enumerate(nodes):
            value = getattr(node, field)
            if value in first:
                problems.append(
                    Problem(
                        ("cluster", "nodes", index, field),
                        f"node {field} {value!r} is used by cluster.nodes[{first[value]}] already",
                        f"every node needs its own {field}",
                    )
                )
            else:
                first[value] = index
    fabric_first: dict[IPv4Address, int] = {}
    for index, node in enumerate(nodes):
        if node.fabric is None:
            continue
        if node.fabric.address in fabric_first:
            problems.append(
                Problem(
                    ("cluster", "nodes", index, "fabric", "address"),
                    f"fabric address {node.fabric.address} is used by "
                    f"cluster.nodes[{fabric_first[node.fabric.address]}] already",
                    "every node needs its own fabric address",
                )
            )
        else:
            fabric_first[node.fabric.address] = index
    return problems


def device_problems(nodes: Sequence[Node], *, device: str) -> list[Problem]:
    """Every node's hardware profile runs vLLM on engine.device."""
    problems: list[Problem] = []
    for index, node in enumerate(nodes):
        profile = PROFILES[node.hardware]
        if profile.device != device:
            problems.append(
                Problem(
                    ("cluster", "nodes", index, "hardware"),
                    f"hardware {node.hardware!r} runs vLLM on {profile.device}, but "
                    f"engine.device is {device!r}",
                    f"set engine.device: {profile.device}, or pick a {device} hardware profile",
                )
            )
    return problems


def netns_problems(nodes: Sequence[Node]) -> list[Problem]:
    """A node in a network namespace: local, with a fabric address, its own namespace."""
    problems: list[Problem] = []
    netns_first: dict[str, int] = {}
    for index, node in enumerate(nodes):
        if node.netns is None:
            continue
        if node.fabric is None:
            problems.append(
                Problem(
                    ("cluster", "nodes", index, "netns"),
                    f"node {node.name!r} runs in a network namespace but has no fabric "
                    "interface and address for it",
                    "add fabric: {interface: <veth name, e.g. ds-veth0>, address: <IPv4>}",
                )
            )
        if node.ssh is not None:
            problems.append(
                Problem(
                    ("cluster", "nodes", index, "netns"),
                    "netns runs the node on this machine; ssh says it is remote",
                    "keep one of netns and ssh",
                )
            )
        if node.netns in netns_first:
            problems.append(
                Problem(
                    ("cluster", "nodes", index, "netns"),
                    f"network namespace {node.netns!r} is used by "
                    f"cluster.nodes[{netns_first[node.netns]}] already",
                    "every node needs its own namespace",
                )
            )
        else:
            netns_first[node.netns] = index
    return problems


def roce_problems(nodes: Sequence[Node], *, transport: str) -> list[Problem]:
    """Transport 'roce' needs every node's RDMA devices (fabric.hcas)."""
    if transport != "roce":
        return []
    problems: list[Problem] = []
    for index, node in enumerate(nodes):
        if node.fabric is None or not node.fabric.hcas:
            where: LocPath = ("cluster", "nodes", index)
            if node.fabric is not None:
                where = (*where, "fabric")
            problems.append(
                Problem(
                    where,
                    f"transport 'roce' needs the RDMA devices of node {node.name!r}",
                    "add fabric: {interface: <netdev>, address: <fabric IPv4>, "
                    "hcas: [<device>, ...]} to the node (devices are listed in "
                    "/sys/class/infiniband)",
                    fallback_locs=(("cluster", "fabric", "transport"),),
                )
            )
    return problems


def rank_problems(
    nodes: Sequence[Node],
    *,
    nnodes: int,
    tensor_parallel_size: int,
    pipeline_parallel_size: int,
    data_parallel_size: int = 1,
) -> list[Problem]:
    """engine.nnodes counts the nodes, and every GPU runs exactly one engine rank."""
    problems: list[Problem] = []
    node_count = len(nodes)
    if nnodes != node_count:
        problems.append(
            Problem(
                ("engine", "nnodes"),
                f"engine.nnodes is {nnodes} but cluster.nodes lists {node_count} "
                f"node{'s' if node_count != 1 else ''}",
                f"set nnodes: {node_count}, or list {nnodes} nodes",
                fallback_locs=(("engine",),),
            )
        )
    total_gpus = sum(node.gpus for node in nodes)
    # world size = tensor_parallel_size × pipeline_parallel_size per engine
    # (vllm ParallelConfig.__post_init__), one engine per data-parallel rank
    ranks = data_parallel_size * tensor_parallel_size * pipeline_parallel_size
    if ranks != total_gpus:
        per_node = " + ".join(str(node.gpus) for node in nodes)
        sizes = f"{tensor_parallel_size} × {pipeline_parallel_size}"
        names = "tensor_parallel_size × pipeline_parallel_size"
        if data_parallel_size > 1:
            sizes = f"{data_parallel_size} × {sizes}"
            names = f"data_parallel_size × {names}"
        problems.append(
            Problem(
                ("engine", "tensor_parallel_size"),
                f"{names} = {sizes} = {ranks} engine rank{'s' if ranks != 1 else ''}, but "
                f"the nodes have {per_node} = {total_gpus} GPU{'s' if total_gpus != 1 else ''}"
                "; every GPU runs exactly one rank",
                f"make {names} equal {total_gpus}, or change the nodes' gpus",
                fallback_locs=(("engine", "pipeline_parallel_size"), ("engine",)),
            )
        )
    return problems


DIGEST_RE = re.compile(r"\S+@sha256:[0-9a-f]{64}")
DIGEST_HINT = (
    "pin the image by digest: run `docker pull IMAGE:TAG` and then `docker inspect "
    "--format '{{index .RepoDigests 0}}' IMAGE:TAG`, or `docker buildx imagetools inspect "
    "IMAGE:TAG`, and write image: name:tag@sha256:<digest>"
)


def container_image_problems(*, runtime_kind: str, image: str | None) -> list[Problem]:
    """The container runtime needs engine.image, pinned by digest."""
    if runtime_kind != "container":
        return []
    if image is None:
        return [
            Problem(
                ("runtime", "kind"),
                "runtime 'container' needs engine.image",
                "set engine.image to the vLLM image pinned by digest "
                "(name:tag@sha256:<digest>), or use runtime.kind: native",
                fallback_locs=(("engine",),),
            )
        ]
    if DIGEST_RE.fullmatch(image) is None:
        return [
            Problem(
                ("engine", "image"),
                f"image {image!r} is not pinned by digest; a tag can be re-pushed, so "
                "the container runtime needs name:tag@sha256:<64 hex digits>",
                DIGEST_HINT,
            )
        ]
    return []


def head_port_problems(ports: Sequence[tuple[int, LocPath]]) -> list[Problem]:
    """Ports that would clash on the head node; `ports` lists each with the key setting it."""
    problems: list[Problem] = []
    taken: dict[int, LocPath] = {}
    for port, loc in ports:
        if port in taken:
            other = ".".join(str(part) for part in taken[port])
            problems.append(
                Problem(
                    loc,
                    f"port {port} is already used by {other} on the head node",
                    "pick a free port",
                    fallback_locs=((loc[0],),),
                )
            )
        else:
            taken[port] = loc
    return problems


__all__ = [
    "DIGEST_HINT",
    "DIGEST_RE",
    "MANAGED_FLAGS",
    "NEEDS_DRAFT_MODEL",
    "alias_problems",
    "container_image_problems",
    "device_problems",
    "draft_model_problems",
    "flag_name",
    "head_port_problems",
    "head_problems",
    "kv_cache_problems",
    "managed_flag_problems",
    "model_source_problems",
    "netns_problems",
    "rank_problems",
    "roce_problems",
    "unique_node_problems",
]
