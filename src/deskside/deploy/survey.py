"""What the preflight reads on one node, every node at once (`deskside.runtime.ops.at_once`):
in one round trip the preflight's facts (`deskside.deploy.preflight.PreflightFacts`), what
must match across the nodes (`deskside.deploy.drift`, more than one node) and, for a pinned
revision, the node's model snapshot (`deskside.models.check.snapshot_fact`); then the
node's recorded state and whether its engine runs. What compares the nodes
(`deskside.facts.drift.compare`, `model_findings`) runs after, on what every node answered."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from deskside.deploy import preflight as pf
from deskside.deploy.deployment import Deployment
from deskside.deploy.drift import drift_facts, shared_of, versions_fact
from deskside.engine.launch import engine_python
from deskside.errors import DesksideError
from deskside.facts.base import Fact, Unread, gather
from deskside.facts.drift import NodeShared
from deskside.facts.model_folder import Snapshot
from deskside.images.held import NodeImage, image_fact
from deskside.models.check import snapshot_fact
from deskside.recipe.types import Node
from deskside.records.node import NodeState, read_state
from deskside.runtime.control import Control

TIMEOUT = 120.0  # the NCCL library's sha256 reads a few hundred megabytes


@dataclass
class NodeLook:
    """One node's answers (problems as findings; the rest None when unreadable)."""

    node: str
    findings: list[pf.Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    matched: NodeShared | None = None
    control: Control | None = None
    state: NodeState | None = None
    state_read: bool = False
    alive: bool = False
    model: Snapshot | Unread | DesksideError | None = None  # the snapshot fact's answer
    image: NodeImage | Unread | DesksideError | None = None  # the engine image's, containers


def engine_image_fact(d: Deployment) -> Fact[NodeImage] | None:
    """The engine image's fact (`deskside.images.held`): a container runtime on more than
    one node, where every worker must hold the head's image."""
    recipe = d.recipe
    if recipe.runtime.kind != "container" or recipe.engine.image is None or not recipe.workers:
        return None
    return image_fact(recipe.engine.image)


def look(d: Deployment, node: Node, base: Control, need_bytes: int) -> NodeLook:
    """The preflight's reads on `node` (see the module docstring)."""
    recipe = d.recipe
    out = NodeLook(node.name)
    t = d.t(node.name)
    env = d.launch(node.name).env_dict
    many = len(recipe.cluster.nodes) > 1
    python = engine_python(recipe)
    drift = drift_facts(recipe, node, env, python) if many else None
    versions = drift.versions if drift else versions_fact(recipe, env, python, nccl=False)
    facts = pf.preflight_facts(recipe, node, d.layout.recipe_dir, versions)
    model = snapshot_fact(recipe)
    image = engine_image_fact(d)
    wanted: list[Fact[Any]] = [*facts.all(), *(drift.all() if drift else [])]
    wanted += [model] if model else []
    wanted += [image] if image else []
    try:
        sent = time.time()
        got = gather(t, *{f.name: f for f in wanted}.values(), timeout=TIMEOUT)
        received = time.time()
    except DesksideError as exc:
        out.findings.append(pf.Finding(node.name, exc.message, exc.hint))
        out.model = exc if model else None
        out.image = exc if image else None
        return out
    if model is not None:
        out.model = got.result(model)
    if image is not None:
        out.image = got.result(image)
    if drift is not None:
        out.matched = shared_of(recipe, node, got, drift, sent, received)
    host = facts.values(got)
    control = base.with_sudo(() if host.root or base.kind == "process" else ("sudo", "-n"))
    out.control = control
    try:
        out.state = read_state(t, d.layout, recipe.name)
    except DesksideError as exc:
        out.findings.append(pf.Finding(node.name, exc.message, exc.hint))
        return out
    out.state_read = True
    out.alive = out.state is not None and control.alive(t, out.state)
    check = pf.check_node(
        host,
        recipe=recipe,
        node=node,
        recipe_dir=d.layout.recipe_dir,
        own_engine_running=out.alive,
        need_bytes=need_bytes,
        head_ports=pf.head_ports(recipe, d.launch(d.head).ports),
    )
    out.findings += check.problems
    out.notes += check.notes
    return out
