"""`deskside.render.lock`: what a rendered bundle pins, and the sha256 of every file in it.

Written by `render()` as `cluster/deskside.lock` (JSON, sorted keys, no timestamps): the
image digest, the model revision, the deskside and vLLM versions, every node's resolved
values (address, rank, argv, environment, how the RoCE GID index is found) and the hash of
each rendered file. Secrets never appear: the proxy master key is named by the path of its
file on the head, never by value.

`diff(old_lock, new_bundle)` says, per host, what applying the new bundle would change:
files added, removed and changed, the pinned values that moved, and whether the engine
restarts. The head hosts the `cluster/` files.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

import deskside
from deskside.errors import UsageError
from deskside.render.bundle import CLUSTER_DIR, Bundle

LOCK_VERSION = 1
LOCK_FILE = "deskside.lock"
LOCK_PATH = f"{CLUSTER_DIR}/{LOCK_FILE}"

_CONFIG = ConfigDict(extra="forbid", frozen=True)

GID_AT_LAUNCH = "resolved from sysfs by launch.sh at every start"


class ModelLock(BaseModel):
    model_config = _CONFIG

    repo: str | None
    revision: str | None
    path: str | None = Field(description="model.path as the recipe writes it")
    node_reference: str = Field(description="what `vllm serve` loads on the nodes")
    served_name: str
    aliases: list[str]


class NodeLock(BaseModel):
    model_config = _CONFIG

    role: str
    node_rank: int
    address: str
    engine_ip: str = Field(description="VLLM_HOST_IP: the fabric address, else the address")
    netns: str | None
    gid_index: str | None = Field(description="NCCL_IB_GID_INDEX, or how it is resolved")
    argv: list[str] = Field(description="the engine command launch.sh execs")
    env: dict[str, str]
    files: dict[str, str] = Field(description="bundle path -> sha256 of its bytes")


class Lock(BaseModel):
    model_config = _CONFIG

    lock_version: int
    recipe: str
    recipe_file: str
    recipe_sha256: str = Field(description="sha256 of the loaded recipe, canonical JSON")
    deskside_version: str
    vllm_version: str
    runtime: str
    image: str | None
    image_digest: str | None
    model: ModelLock
    layout: dict[str, str]
    plan: dict[str, Any]
    services: dict[str, Any]
    nodes: dict[str, NodeLock]
    cluster_files: dict[str, str]

    def text(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"

    def host_files(self, host: str) -> dict[str, str]:
        """Bundle path -> sha256 of the files that land on `host` (the head also holds
        the cluster files)."""
        node = self.nodes.get(host)
        if node is None:
            return {}
        files = dict(node.files)
        if node.role == "head":
            files.update(self.cluster_files)
        return files


def image_digest(image: str | None) -> str | None:
    if image is None or "@" not in image:
        return None
    return image.rsplit("@", 1)[1]


def recipe_sha256(recipe_json: str) -> str:
    return hashlib.sha256(recipe_json.encode()).hexdigest()


def deskside_version() -> str:
    return deskside.__version__


def parse_lock(text: str, where: str = LOCK_FILE) -> Lock:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not a deskside lock ({exc.msg})") from None
    if not isinstance(data, dict) or data.get("lock_version") != LOCK_VERSION:
        raise UsageError(
            f"{where}: not a deskside lock of version {LOCK_VERSION}",
            hint="render the recipe again with this deskside to get a current lock",
        )
    try:
        return Lock.model_validate(data)
    except ValidationError as exc:
        raise UsageError(
            f"{where}: malformed deskside lock ({exc.error_count()} problems)"
        ) from None


def read_lock(path: Path) -> Lock:
    """A lock file, or the lock inside a rendered bundle folder."""
    if path.is_dir():
        path = path / CLUSTER_DIR / LOCK_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such lock file") from None
    return parse_lock(text, str(path))


def bundle_lock(bundle: Bundle) -> Lock:
    return parse_lock(bundle[LOCK_PATH].decode(), LOCK_PATH)


# --------------------------------------------------------------------------- diff


class HostDiff(BaseModel):
    """What applying a new bundle changes on one host."""

    model_config = _CONFIG

    host: str
    role: str | None
    added: list[str]
    removed: list[str]
    changed: list[str]
    unchanged: int
    values: list[str] = Field(description="pinned values that moved (image, model, argv, ...)")
    restart_engine: bool
    reload: list[str] = Field(description="cluster services whose configuration changed")

    @property
    def changes_anything(self) -> bool:
        return bool(self.added or self.removed or self.changed)


_ENGINE_FILES = ("compose.yaml", "launch.sh", "node.env")
_CLUSTER_SERVICES = {"litellm": "proxy", "prometheus": "prometheus", "grafana": "grafana"}
# node files that configure a service beside the engine (what the exporter reads, the
# node's node_exporter under Compose)
_NODE_SERVICES = {"recipe.yaml": "exporter", "monitoring.compose.yaml": "node-exporter"}


def _value_changes(old: Lock | None, new: Lock, host: str) -> list[str]:
    out: list[str] = []
    if old is None:
        return ["first deployment"]
    for label, before, after in (
        ("image", old.image, new.image),
        ("model revision", old.model.revision, new.model.revision),
        ("model", old.model.node_reference, new.model.node_reference),
        ("vLLM version", old.vllm_version, new.vllm_version),
        ("deskside version", old.deskside_version, new.deskside_version),
        ("runtime", old.runtime, new.runtime),
    ):
        if before != after:
            out.append(f"{label}: {before} -> {after}")
    before_node, after_node = old.nodes.get(host), new.nodes.get(host)
    if before_node is not None and after_node is not None:
        if before_node.argv != after_node.argv:
            out.append("engine arguments changed")
        moved = sorted(
            name
            for name in set(before_node.env) | set(after_node.env)
            if before_node.env.get(name) != after_node.env.get(name)
        )
        if moved:
            out.append("environment changed: " + ", ".join(moved))
        if before_node.role != after_node.role:
            out.append(f"role: {before_node.role} -> {after_node.role}")
    return out


def diff(old: Lock | None, new_bundle: Bundle) -> list[HostDiff]:
    """Per host (new nodes in recipe order, then hosts the new bundle drops), what applying
    `new_bundle` over a deployment locked by `old` (None: nothing deployed) changes."""
    new = bundle_lock(new_bundle)
    hosts = list(new.nodes)
    if old is not None:
        hosts += [h for h in old.nodes if h not in new.nodes]
    out: list[HostDiff] = []
    for host in hosts:
        before = old.host_files(host) if old is not None else {}
        after = new.host_files(host)
        added = sorted(set(after) - set(before))
        removed = sorted(set(before) - set(after))
        changed = sorted(p for p in set(after) & set(before) if after[p] != before[p])
        touched = [*added, *removed, *changed]
        node_files = [p for p in touched if not p.startswith(CLUSTER_DIR + "/")]
        restart = any(p.split("/", 1)[-1] in _ENGINE_FILES for p in node_files) or (
            host not in new.nodes
        )
        reload = sorted(
            {
                service
                for p in touched
                if p.startswith(CLUSTER_DIR + "/")
                for folder, service in _CLUSTER_SERVICES.items()
                if p.split("/")[1] == folder
            }
            | {
                _NODE_SERVICES[p.split("/", 1)[-1]]
                for p in node_files
                if p.split("/", 1)[-1] in _NODE_SERVICES
            }
        )
        node = new.nodes.get(host) or (old.nodes.get(host) if old is not None else None)
        out.append(
            HostDiff(
                host=host,
                role=node.role if node is not None else None,
                added=added,
                removed=removed,
                changed=changed,
                unchanged=len(set(after) & set(before)) - len(changed),
                values=_value_changes(old, new, host) if host in new.nodes else ["removed"],
                restart_engine=restart,
                reload=reload,
            )
        )
    return out
