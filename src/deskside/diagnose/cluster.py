"""The cluster-wide part of a diagnosis: the recipe, `deskside status --json`, the head
engine's /metrics, the plan (`deskside plan --json`), the lock of the deployed release,
`deskside fabric show`, and doctor's findings. Each piece that fails is recorded with why;
the others are still collected."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx

from deskside.diagnose.manifest import Member
from deskside.errors import DesksideError
from deskside.httpclient import Limits, client
from deskside.recipe.types import Recipe
from deskside.records.run import RunRecord
from deskside.render.lock import LOCK_PATH
from deskside.smallfile import read_small_file
from deskside.transport.base import Transport

HTTP_TIMEOUT = 10.0
PARALLEL = 3  # pieces at once: a node's SSH server allows 10 sessions per connection
MAX_METRICS_BYTES = 8 << 20
MAX_RECIPE_BYTES = 1 << 20

Progress = Callable[[str], None]


def _json(data: object) -> str:
    return json.dumps(data, indent=2, default=str) + "\n"


@dataclass
class ClusterCollector:
    run: RunRecord
    transports: Mapping[str, Transport]
    recipe: Recipe | None
    recipe_path: Path | None
    recipe_error: str | None = None
    progress: Progress | None = None
    http_transport: httpx.BaseTransport | None = None
    members: list[Member] = field(default_factory=list)

    def _piece(self, name: str, source: str, get: Callable[[], str]) -> Member:
        if self.progress is not None:
            self.progress(f"cluster: {name.removeprefix('cluster/')}")
        t0 = time.monotonic()
        try:
            member = Member(name, source, get())
        except DesksideError as exc:
            member = Member(name, source, error=exc.message)
        except Exception as exc:  # recorded, never fatal
            member = Member(name, source, error=f"{type(exc).__name__}: {exc}")
        return replace(member, seconds=time.monotonic() - t0)

    def _needs_recipe(
        self, name: str, source: str, get: Callable[[Recipe, Path], str]
    ) -> Callable[[], Member]:
        recipe, path = self.recipe, self.recipe_path
        if recipe is None or path is None:
            why = f"the recipe could not be loaded: {self.recipe_error or 'unknown'}"
            return lambda: Member(name, source, error=why)
        return lambda: self._piece(name, source, lambda: get(recipe, path))

    def collect(self) -> ClusterCollector:
        """Every piece, `PARALLEL` at a time (the slowest, doctor and status, first)."""
        url = f"{self.run.api_url}/metrics"
        pieces: list[Callable[[], Member]] = [
            self._needs_recipe("cluster/doctor.json", "deskside doctor --json", self._doctor),
            lambda: self._piece("cluster/status.json", "deskside status --json", self._status),
            self._needs_recipe(
                "cluster/fabric-show.json", "deskside fabric show --json", self._fabric
            ),
            lambda: self._piece("cluster/engine-metrics.txt", f"GET {url}", lambda: self._get(url)),
            self._needs_recipe("cluster/plan.json", "deskside plan --json", _plan),
            self._lock,
            lambda: self._piece(
                "cluster/run.json", "this machine: the run record", self._run_record
            ),
        ]
        if self.recipe_path is not None:
            path = self.recipe_path
            pieces.append(
                lambda: self._piece(
                    "cluster/recipe.yaml", f"this machine: {path}", lambda: _recipe(path)
                )
            )
        with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
            self.members = list(pool.map(lambda piece: piece(), pieces))
        return self

    # -- pieces

    def _run_record(self) -> str:
        return self.run.model_dump_json(indent=2) + "\n"

    def _status(self) -> str:
        from deskside.operate.status import status

        return _json(status(self.run, self.transports, self.http_transport).to_dict())

    def _get(self, url: str) -> str:
        try:
            limits = Limits(total=HTTP_TIMEOUT, max_bytes=MAX_METRICS_BYTES)
            with client(limits, self.http_transport) as http:
                r = http.get(url)
        except httpx.HTTPError as exc:
            raise DesksideError(f"GET {url}: {exc or type(exc).__name__}") from None
        if r.status_code != 200:
            raise DesksideError(f"GET {url}: HTTP {r.status_code}")
        return r.text[-MAX_METRICS_BYTES:]

    def _lock(self) -> Member:
        name = "cluster/deskside.lock"
        run = self.run
        head = next((n for n in run.nodes if n.role == "head"), None)
        if run.release is None or head is None:
            why = "a run on this machine renders no lock" if run.release is None else "no head"
            return Member(name, "the head's current release", skipped=why)
        path = f"{run.layout(head).current}/{LOCK_PATH}"
        t = self.transports[head.name]

        def get() -> str:
            try:
                return t.get(path).decode(errors="replace")
            except FileNotFoundError:
                raise DesksideError(f"{t.name}: no lock file at {path}") from None

        return self._piece(name, f"{t.name}:{path}", get)

    def _fabric(self, recipe: Recipe, path: Path) -> str:
        from deskside.fabric.show import show_recipe

        return _json(show_recipe(recipe, self.transports).model_dump(mode="json"))

    def _doctor(self, recipe: Recipe, path: Path) -> str:
        from deskside.doctor.match import must_match
        from deskside.doctor.run import Doctor

        doc = Doctor(recipe, path, self.transports, self.run.known_hosts, extra_checks=[must_match])
        return _json(doc.run().to_dict())


def _recipe(path: Path) -> str:
    from deskside.home import embedded_recipes

    embedded = embedded_recipes()
    if not path.exists() and path.suffix == ".yaml" and path.stem in embedded:
        return embedded[path.stem]  # an embedded recipe, known by a virtual path
    try:
        text = read_small_file(str(path), MAX_RECIPE_BYTES).decode(errors="replace")
    except OSError as exc:
        raise DesksideError(f"{path}: {exc.strerror or exc}") from None
    from deskside.errors import RecipeError
    from deskside.recipe.load import load_recipe_text

    try:  # the record names it: only a recipe goes into the bundle, never another file
        load_recipe_text(text, str(path), base_dir=path.parent)
    except RecipeError:
        raise DesksideError(f"{path} is not a recipe now: left out") from None
    return text


def _plan(recipe: Recipe, path: Path) -> str:
    from deskside.planner.inputs import plan_recipe

    return _json(plan_recipe(recipe, path).model_dump(mode="json"))
