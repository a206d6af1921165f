"""The embedded two-group replica set (local-replicas: four network namespaces, one real
LiteLLM proxy) with the stand-in engine (`tests/stand_in_engine.py`), and a steady
open-loop load through its proxy: what the upgrade's integration test and
benchmarks/upgrade.py share.

`set_recipe(folder, version, delay)` writes the recipe as a user would edit it: engine.env
gets DESKSIDE_RELEASE=<version> (what changed) and STAND_IN_DELAY=<delay> (how long the
stand-in takes per request). `OpenLoad` sends chat requests through the proxy at a fixed
rate, each on its own thread (arrivals never wait for answers), and counts every answer
that is not a 200 with choices as failed."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from deskside.home import embedded_recipes
from deskside.planner.inputs import plan_recipe
from deskside.recipe.groups import group_recipes
from deskside.recipe.load import load_recipe
from deskside.tiny import write_tiny_model

from .cli_process import deskside
from .stand_in_engine import stand_in

NAME = "local-replicas"
# the set's own namespaces, veths, addresses and proxy port: never those of a local-replicas
# run that is up on this machine (set_recipe renames them)
RENAMES = (
    ("10.79.", "10.81."),
    ("netns: ds-r", "netns: ds-u"),
    ("interface: ds-rv", "interface: ds-uv"),
    ("port: 4100", "port: 4200"),
)
PROXY = "http://127.0.0.1:4200"
ROOT = Path(__file__).parents[1]
PROXY_BIN = Path(os.environ.get("DESKSIDE_PROXY_VENV", ROOT / ".venv-proxy")) / "bin"


def can_run() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "needs root (network namespaces)"
    if not (PROXY_BIN / "litellm").exists():
        return False, f"litellm is not installed in {PROXY_BIN}"
    return True, ""


def set_recipe(folder: Path, version: str, delay: float) -> Path:
    """The embedded recipe, run by the stand-in engine, at `version` (see the module
    docstring); the tiny model and the stand-in made on first use."""
    text = embedded_recipes()[NAME]
    for old, new in RENAMES:
        assert old in text, old
        text = text.replace(old, new)
    python = folder / "stand-in" / "python"
    text = text.replace(
        "runtime:\n  kind: native\n  systemd: false\n",
        f"runtime:\n  kind: native\n  systemd: false\n  python: {python}\n",
    )
    old_env = '  env:\n    HF_HUB_OFFLINE: "1"\n'
    assert old_env in text
    text = text.replace(
        old_env,
        old_env + f'    DESKSIDE_RELEASE: "{version}"\n    STAND_IN_DELAY: "{delay}"\n',
    )
    model = folder / "models" / "tiny-llama"
    if not (model / "config.json").is_file():
        write_tiny_model("llama", model)
    path = folder / f"{NAME}-{version}.yaml"
    path.write_text(text)
    if not python.exists():
        recipe = load_recipe(path)
        one = next(iter(group_recipes(recipe).values()))
        stand_in(python.parent, plan_recipe(one, path).kv_cache_line)
    return path


def master_key(home: Path, name: str = NAME) -> str:
    """The proxy's master key of the run `name` (the replica set's by default)."""
    return (home / "secrets" / name / "proxy-master-key").read_text().strip()


def run_json(home: Path, run: str) -> Any:
    """The record `deskside up` keeps of the run `run`."""
    return json.loads((home / "runs" / run / "run.json").read_text())


def head_state(home: Path, run: str) -> Any:
    """The node state of the run's head engine."""
    head = next(n for n in run_json(home, run)["nodes"] if n["role"] == "head")
    return json.loads((Path(head["recipe_dir"]) / "state.json").read_text())


def release_of(home: Path, run: str) -> str | None:
    """DESKSIDE_RELEASE in the environment of the run's running head engine."""
    environ = Path(f"/proc/{head_state(home, run)['pid']}/environ").read_bytes().split(b"\0")
    for item in environ:
        if item.startswith(b"DESKSIDE_RELEASE="):
            return item.split(b"=", 1)[1].decode()
    return None


def head_release(home: Path, group: str) -> str | None:
    """DESKSIDE_RELEASE in the environment of the group's running head engine."""
    return release_of(home, f"{NAME}-{group}")


@dataclass
class OpenLoad:
    """Chat requests through the proxy at `rate` per second until stopped."""

    url: str
    key: str
    rate: float = 8.0
    models: tuple[str, ...] = ("llama-tiny", "tiny-replicas")  # sent in turn
    sent: int = 0
    answered: int = 0
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _one(self, client: httpx.Client, i: int) -> None:
        body = {
            "model": self.models[i % len(self.models)],
            "messages": [{"role": "user", "content": f"request {i}"}],
            "max_tokens": 4,
        }
        try:
            r = client.post(f"{self.url}/v1/chat/completions", json=body)
            ok = r.status_code == 200 and bool(r.json().get("choices"))
            why = f"HTTP {r.status_code}: {r.text[:200]}"
        except (httpx.HTTPError, ValueError) as exc:
            ok, why = False, f"{type(exc).__name__}: {exc}"
        with self._lock:
            self.answered += 1
            if not ok:
                self.failures.append(f"request {i}: {why}")

    def _schedule(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(
            timeout=120, headers=headers, limits=httpx.Limits(max_connections=200)
        ) as client:
            t0 = time.monotonic()
            i = 0
            while not self._stop.is_set():
                due = t0 + i / self.rate
                if (wait := due - time.monotonic()) > 0:
                    time.sleep(wait)
                t = threading.Thread(target=self._one, args=(client, i), daemon=True)
                t.start()
                self._threads.append(t)
                self.sent += 1
                i += 1
            for t in self._threads:
                t.join(timeout=180)

    def __enter__(self) -> OpenLoad:
        self._runner = threading.Thread(target=self._schedule, daemon=True)
        self._runner.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._runner.join(timeout=240)


def cli(home: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env_litellm = str(PROXY_BIN / "litellm")
    os.environ.setdefault("DESKSIDE_LITELLM", env_litellm)
    return deskside(*args, home=home, timeout=timeout)


def upgrade_under_load(
    home: Path, recipe: Path, load: OpenLoad, settle: float, timeout: float
) -> tuple[subprocess.CompletedProcess[str], float]:
    """`deskside upgrade RECIPE --json` while `load` runs, from `settle` seconds before the
    upgrade to `settle` seconds after it: the command's result and the upgrade's seconds."""
    with load:
        time.sleep(settle)
        t0 = time.monotonic()
        r = cli(home, "upgrade", str(recipe), "--json", timeout=timeout)
        seconds = time.monotonic() - t0
        time.sleep(settle)
    return r, seconds


__all__ = [
    "NAME",
    "PROXY",
    "OpenLoad",
    "can_run",
    "cli",
    "head_release",
    "head_state",
    "master_key",
    "release_of",
    "run_json",
    "set_recipe",
    "upgrade_under_load",
]
