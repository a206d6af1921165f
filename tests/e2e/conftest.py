"""The e2e tier's shared pieces.

- `local_tiny`: ONE running two-node cluster for the whole test run, serving every check
  that only needs "a running cluster" (names serve, the proxy is the only door, probe,
  bench against the server's counters, Prometheus targets, monitor check, top, status).
  It is the embedded local-tiny recipe (TP=2 across two network namespaces, MTP, LiteLLM
  in front, Prometheus, node_exporter, deskside's exporter and watch beside), brought up by
  `deskside demo --keep-up` from a fresh `pip install '.[cpu]'` venv: the plain pip path
  and the demo are proven by the same start.
- `pip_venv`: that venv. Its install starts in the background with the first e2e test
  of a run that needs it, and the cluster's tests run last, so the download overlaps
  the other modules' engine starts.
- Ordering: tests that do not use the shared cluster first; then its users; last, those
  marked `breaks_cluster` (a wedge, a killed worker, `down`), in file order.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..cli_process import deskside
from . import pip_venv

SHARED = ("local_tiny", "pip_venv_install")
RECIPE = "local-tiny"


def _rank(item: pytest.Item) -> int:
    names = getattr(item, "fixturenames", ())
    if not any(name in names for name in SHARED):
        return 0
    return 2 if item.get_closest_marker("breaks_cluster") else 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: file order within each rank


@pytest.fixture(scope="session", autouse=True)
def _pip_install_early(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[pip_venv.Install | None]:
    """Starts the pip install at the first e2e test when the run will need it."""
    items = request.session.items
    if not any(_rank(item) for item in items):
        yield None
        return
    install = pip_venv.start(tmp_path_factory.mktemp("pip-path"))
    try:
        yield install
    finally:
        install.stop()


@pytest.fixture(scope="session")
def pip_venv_install(
    _pip_install_early: pip_venv.Install | None, tmp_path_factory: pytest.TempPathFactory
) -> pip_venv.Install:
    install = _pip_install_early or pip_venv.start(tmp_path_factory.mktemp("pip-path"))
    return install.wait()


@dataclass
class SharedCluster:
    """The shared local-tiny cluster: its DESKSIDE_HOME and what the demo reported."""

    home: Path
    demo: dict[str, Any]
    seconds: float  # the demo's wall time, start-up, completions and its small bench

    def cli(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        """`deskside` of this checkout on the cluster's home."""
        return deskside(*args, home=self.home, timeout=timeout)

    @property
    def api_url(self) -> str:
        return str(self.demo["api_url"])

    @property
    def proxy_url(self) -> str:
        return str(self.demo["proxy_url"])

    @property
    def served_names(self) -> list[str]:
        return [c["model"] for c in self.demo["completions"]]

    def node_states(self) -> list[dict[str, Any]]:
        """What deskside recorded it started on each node (the engine's pid, its start
        time and run tag, the services), from the run record's node folders."""
        run = json.loads((self.home / "runs" / RECIPE / "run.json").read_text())
        return [
            json.loads((Path(node["recipe_dir"]) / "state.json").read_text())
            for node in run["nodes"]
        ]

    def status(self) -> dict[str, Any]:
        r = self.cli("status", "--json", timeout=120)
        return json.loads(r.stdout)  # type: ignore[no-any-return]

    def engine_key(self) -> str:
        """The engine's own key (the proxy fronts it, so /v1 needs it)."""
        line = (self.home / "secrets" / RECIPE / "engine.env").read_text().strip()
        name, _, value = line.partition("=")
        assert name == "VLLM_API_KEY" and value
        return value

    def master_key(self) -> str:
        return (self.home / "secrets" / RECIPE / "proxy-master-key").read_text().strip()


@pytest.fixture(scope="session")
def local_tiny(
    pip_venv_install: pip_venv.Install, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SharedCluster]:
    install = pip_venv_install
    assert install.returncode == 0, "pip install '.[cpu]' failed:\n" + install.tail()
    home, work = tmp_path_factory.mktemp("shared-home"), tmp_path_factory.mktemp("shared-work")
    t0 = time.monotonic()
    r = subprocess.run(
        [str(install.deskside), "demo", "--keep-up", "--json"],
        cwd=work,
        env=pip_venv.clean_env(DESKSIDE_HOME=str(home)),
        capture_output=True,
        text=True,
        timeout=1500,
    )
    seconds = time.monotonic() - t0
    try:
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-6000:]
        yield SharedCluster(home, json.loads(r.stdout), seconds)
    finally:
        deskside("down", home=home, timeout=300)
