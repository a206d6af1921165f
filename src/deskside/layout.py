"""Where a recipe's files live on a node, and which model folder the engine loads there.
Pure: paths are computed, never touched.

On every deployed node, with `R/N` = `runtime.root`/recipe name:

    R/N/releases/<id>/            one release: the node's bundle folder (+ cluster/ on the head)
    R/N/releases/.partial-<id>/   a release being pushed (renamed into place when complete)
    R/N/current                   relative link `releases/<id>`, switched atomically by rename
    R/N/state.json                what deskside started here (`deskside.records.node`)
    R/N/logs/<id>.<start>.log     the engine's output of release <id> started at <start>
    R/N/models/<folder>/          a pushed local model folder (+ .deskside-manifest.json)
    R/N/cache/                    the engine container's ~/.cache (vLLM/FlashInfer caches)
    R/N/secrets/                  0700; the generated proxy master key and the engine key
                                  file engine.env (0600, head only)
    runtime.hf_cache              the Hugging Face cache (weights), the same path in containers

A run on this machine (`deskside.runtime.local`) uses the same shape per node under
`$DESKSIDE_HOME/runs/<recipe>/nodes/<node>/` (state and logs only: nothing is pushed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from deskside.errors import UsageError
from deskside.recipe.types import Recipe

STATE_FILE = "state.json"
MANIFEST_FILE = ".deskside-manifest.json"
ENGINE_ENV_FILE = "engine.env"
ENGINE_KEY_ENV = "VLLM_API_KEY"  # the key vLLM's API server requires (vllm.envs.VLLM_API_KEY)


@dataclass(frozen=True)
class NodeLayout:
    """The paths of one recipe's deployment on a node (see the module docstring)."""

    recipe_dir: str  # R/N
    unit_name: str  # the systemd unit of the engine
    compose_project: str  # the Compose project of the engine

    @classmethod
    def of(cls, recipe: Recipe) -> NodeLayout:
        """The layout of a deployed recipe (under `runtime.root`)."""
        root = recipe.runtime.root.rstrip("/") or "/"
        return cls.at(str(PurePosixPath(root) / recipe.name), recipe.name)

    @classmethod
    def at(cls, recipe_dir: str, recipe_name: str) -> NodeLayout:
        return cls(
            recipe_dir=recipe_dir,
            unit_name=f"deskside-{recipe_name}.service",
            compose_project=f"deskside-{recipe_name}",
        )

    def _p(self, *parts: str) -> str:
        return str(PurePosixPath(self.recipe_dir, *parts))

    @property
    def root(self) -> str:
        return str(PurePosixPath(self.recipe_dir).parent)

    @property
    def current(self) -> str:
        """The release the node runs (a link switched between release folders)."""
        return self._p("current")

    @property
    def releases(self) -> str:
        return self._p("releases")

    @property
    def state_file(self) -> str:
        return self._p(STATE_FILE)

    @property
    def logs(self) -> str:
        return self._p("logs")

    @property
    def models(self) -> str:
        return self._p("models")

    @property
    def secrets(self) -> str:
        return self._p("secrets")

    @property
    def engine_env(self) -> str:
        """The head's secret engine environment (the engine's API key), 0600."""
        return self._p("secrets", ENGINE_ENV_FILE)

    @property
    def cache(self) -> str:
        return self._p("cache")

    def service_data(self, service: str) -> str:
        """Where a service beside the engine keeps its data on the head (R/N/data/<service>)."""
        return self._p("data", service)

    def release(self, rid: str) -> str:
        return self._p("releases", rid)

    def staging(self, rid: str) -> str:
        return self._p("releases", f".partial-{rid}")

    def engine_log(self, rid: str, started: str) -> str:
        """One file per start (a restarted release must not replay its old shutdown)."""
        return self._p("logs", f"{rid}.{started}.log")

    def service_log(self, rid: str, started: str, service: str) -> str:
        """The output of a service started beside the engine (proxy, monitoring)."""
        return self._p("logs", f"{rid}.{started}.{service}.log")


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


def model_here(recipe: Recipe, recipe_path: Path) -> str:
    """What `vllm serve` loads when the engine runs on this machine: the local folder
    (absolute), or the Hugging Face repo id."""
    m = recipe.model
    if m.path:
        path = Path(m.path)
        if not path.is_absolute():
            path = (recipe_path.parent / path).resolve()
        return str(path)
    assert m.repo is not None  # the recipe rules require a path or a repo
    return m.repo


def model_on_nodes(recipe: Recipe, recipe_path: Path, layout: NodeLayout) -> str:
    """What `vllm serve` loads on deployed nodes: the Hugging Face repo id; a local model
    folder pushed to `R/N/models/<folder name>`; or any other path as written.

    Never a path of the machine running deskside: a bundle is the same wherever it is
    rendered."""
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
    return f"{layout.models}/{name}"


def model_upload(recipe: Recipe, recipe_path: Path) -> tuple[Path, str] | None:
    """For a recipe serving a model folder of this machine (`model.path` inside the
    recipe's folder): that folder and where the deploy must put it on every node."""
    local = local_model_folder(recipe, recipe_path)
    if local is None:
        return None
    return local, model_on_nodes(recipe, recipe_path, NodeLayout.of(recipe))
