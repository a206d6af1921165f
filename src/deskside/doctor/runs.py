"""deskside's own runs as `deskside doctor` sees them: which nodes of this recipe run the
engine deskside started (their run tags are fine wherever they show up), and which records
outlived their engines (a dead run: state files on the nodes, the run record on this
machine). Only those records are ever removed; what the engines left in shared memory is
judged by the shared-memory scan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from deskside.doctor.findings import Finding
from deskside.errors import DesksideError
from deskside.layout import NodeLayout
from deskside.recipe.types import Node, Recipe
from deskside.records.node import read_state, remove_state_argv
from deskside.records.read import BadState
from deskside.records.run import RunRecord, load_run
from deskside.records.where import local_node_dir, run_file
from deskside.runtime.control import Control
from deskside.runtime.nodes import login_control
from deskside.runtime.transports import HERE, transport_for
from deskside.transport.base import Transport
from deskside.transport.local import LocalTransport

FORGET = "deskside down {name}"


@dataclass
class OwnRuns:
    """What doctor learned of this recipe's run and of the runs its tags name."""

    live_tags: set[str] = field(default_factory=set)
    alive: dict[str, bool] = field(default_factory=dict)  # node -> this recipe's engine runs
    findings: list[Finding] = field(default_factory=list)


def node_layout(recipe: Recipe, run: RunRecord | None, node: Node) -> NodeLayout:
    """Where deskside keeps this node's state: the run record's word, else the recipe's
    (a run on this machine under $DESKSIDE_HOME, a deployed one under runtime.root)."""
    if run is not None:
        rn = next((n for n in run.nodes if n.name == node.name), None)
        if rn is not None:
            return run.layout(rn)
    if node.ssh is None:
        return NodeLayout.at(str(local_node_dir(recipe.name, node.name)), recipe.name)
    return NodeLayout.of(recipe)


def node_alive(
    t: Transport, recipe_name: str, runtime_kind: str, layout: NodeLayout
) -> tuple[bool | None, set[str]]:
    """(whether deskside's engine on the node runs — None: no state there, and the run
    tags of what runs). BadState when the state file is not one deskside wrote."""
    state = read_state(t, layout, recipe_name)
    if state is None:
        return None, set()
    control = login_control(t, Control(state.control, runtime_kind, layout))
    tags: set[str] = set()
    alive = control.alive(t, state)
    if alive and state.run_tag:
        tags.add(state.run_tag)
    for s in state.services:
        if s.run_tag and control.service_alive(t, s):
            tags.add(s.run_tag)
            alive = True
    return alive, tags


def own_runs(recipe: Recipe, state_transports: Mapping[str, Transport]) -> OwnRuns:
    """This recipe's nodes: live (their tags), or dead with records left (findings)."""
    out = OwnRuns()
    try:
        run = load_run(recipe.name)
    except BadState as exc:
        out.findings.append(
            Finding(
                "bad-record",
                HERE,
                exc.message,
                severity="warning",
                fix=f"deskside down --forget {recipe.name}",
            )
        )
        run = None
    runtime_kind = run.runtime_kind if run else recipe.runtime.kind
    dead_states = []
    for node in recipe.cluster.nodes:
        t = state_transports[node.name]
        layout = node_layout(recipe, run, node)
        try:
            alive, tags = node_alive(t, recipe.name, runtime_kind, layout)
        except DesksideError as exc:
            out.findings.append(
                Finding("bad-record", node.name, exc.message, severity="warning", fix=exc.hint)
            )
            continue
        out.live_tags |= tags
        out.alive[node.name] = bool(alive)
        if alive is False:
            dead_states.append(node.name)
            out.findings.append(
                Finding(
                    "dead-run",
                    node.name,
                    f"{layout.state_file}: deskside's record of an engine that no longer runs",
                    fixable=True,
                    severity="info",
                    fix=FORGET.format(name=recipe.name),
                    action=tuple(remove_state_argv(layout)),
                    detail={"path": layout.state_file, "layout": layout.recipe_dir},
                )
            )
    if run is not None and not any(out.alive.values()):
        path = str(run_file(recipe.name))
        out.findings.append(
            Finding(
                "dead-run",
                HERE,
                f"{path}: the record of a run whose engines no longer run",
                fixable=True,
                severity="info",
                fix=FORGET.format(name=recipe.name),
                action=("rm", "-f", "--", path),
                detail={"path": path},
            )
        )
    return out


def other_live_tags(tags: set[str], recipe_name: str, known_hosts: str | None) -> set[str]:
    """Of run tags seen on the nodes that name another recipe, those a live run of that
    recipe recorded (its run record on this machine, its node's state)."""
    live: set[str] = set()
    for tag in sorted(tags):
        parts = tag.split("/")
        if len(parts) != 4 or parts[0] == recipe_name:
            continue
        try:
            run = load_run(parts[0])
        except DesksideError:
            continue
        node = next((n for n in run.nodes if n.name == parts[1]), None) if run else None
        if run is None or node is None:
            continue
        try:
            t = LocalTransport() if node.ssh is None else transport_for(node, known_hosts)
            _, node_tags = node_alive(t, run.recipe_name, run.runtime_kind, run.layout(node))
        except DesksideError:
            continue
        live |= node_tags
    return live
