"""What the preflight reads on one node, every node at once (`deskside.runtime.ops.at_once`):
the facts probe (`deskside.deploy.preflight.facts_command`, with what must match across
the nodes in the same round trip), the node's recorded state and whether its engine runs,
and, for a pinned revision, the node's model snapshot (`deskside.models.check.model_fact`).
What compares the nodes (`deskside.doctor.match.compare`, `model_findings`) runs after,
on what every node answered."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from deskside.deploy import preflight as pf
from deskside.deploy.deployment import Deployment
from deskside.doctor import match
from deskside.errors import DesksideError
from deskside.models.check import model_fact
from deskside.models.sync import cache_entry
from deskside.recipe.types import Node, Recipe
from deskside.records.node import NodeState, read_state
from deskside.runtime.control import Control
from deskside.transport.base import Result, Transport


@dataclass
class NodeLook:
    """One node's answers (problems as findings; the rest None when unreadable)."""

    node: str
    findings: list[pf.Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    matched: match.NodeMatch | None = None
    control: Control | None = None
    state: NodeState | None = None
    state_read: bool = False
    alive: bool = False
    model: Result | DesksideError | None = None  # the model fact's answer


def model_fact_argv(recipe: Recipe) -> list[str] | None:
    """The model fact `model_findings` runs on every node (a pinned revision on more than
    one node), or None."""
    m = recipe.model
    workers = recipe.workers
    if m.repo is None or m.revision is None or not workers:
        return None
    return model_fact(cache_entry(recipe.runtime.hf_cache, m.repo), m.revision)


def look(d: Deployment, node: Node, base: Control, need_bytes: int) -> NodeLook:
    """The preflight's reads on `node` (see the module docstring)."""
    out = NodeLook(node.name)
    unreachable = _look(d, node, base, need_bytes, out)
    argv = model_fact_argv(d.recipe)
    if argv is not None:
        try:
            out.model = unreachable or d.t(node.name).run(argv, timeout=120)
        except DesksideError as exc:
            out.model = exc
    return out


def _look(
    d: Deployment, node: Node, base: Control, need_bytes: int, out: NodeLook
) -> DesksideError | None:
    """The facts, state and liveness into `out`; the error when the node is unreachable."""
    recipe = d.recipe
    t = d.t(node.name)
    facts_argv = pf.facts_command(
        d.layout.recipe_dir,
        python=pf.node_python(recipe) if recipe.runtime.kind == "native" else None,
        compose=recipe.runtime.compose if recipe.runtime.kind == "container" else None,
        programs=list(pf.service_programs(recipe, node.role == "head")),
        key_file=recipe.proxy.master_key_file if node.role == "head" else None,
        # what must match across the nodes, in the same round trip
        then=match.preflight_args(recipe, node, d.launch(node.name).env_dict),
    )
    try:
        sent = time.time()
        r = t.run(facts_argv, timeout=60)
        received = time.time()
    except DesksideError as exc:
        out.findings.append(pf.Finding(node.name, exc.message, exc.hint))
        return exc
    if not r.ok:
        out.findings.append(
            pf.Finding(node.name, f"preflight probe failed (exit {r.rc}): {r.stderr[-300:]}")
        )
        return None
    facts = pf.parse_facts(r.stdout)
    out.matched = match.read_preflight(recipe, node, r.stdout, sent, received)
    control = base.with_sudo(() if facts.root or base.kind == "process" else ("sudo", "-n"))
    out.control = control
    try:
        out.state = read_state(t, d.layout, recipe.name)
    except DesksideError as exc:
        out.findings.append(pf.Finding(node.name, exc.message, exc.hint))
        return None
    out.state_read = True
    out.alive = out.state is not None and control.alive(t, out.state)
    check = pf.check_node(
        facts,
        recipe=recipe,
        node=node,
        recipe_dir=d.layout.recipe_dir,
        own_engine_running=out.alive,
        need_bytes=need_bytes,
        head_ports=pf.head_ports(recipe, d.launch(d.head).ports),
    )
    out.findings += check.problems
    out.notes += check.notes
    return None


class Answered:
    """A node's Transport that answers one command from an answer already read (the model
    fact, read with the preflight's); everything else goes to the node."""

    def __init__(self, inner: Transport, argv: Sequence[str], answer: Result | DesksideError):
        self.inner, self.argv, self.answer = inner, tuple(argv), answer

    @property
    def name(self) -> str:
        return self.inner.name

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        input: str | None = None,
    ) -> Result:
        if tuple(argv) == self.argv and env is None and input is None:
            if isinstance(self.answer, DesksideError):
                raise self.answer
            return self.answer
        return self.inner.run(argv, env=env, timeout=timeout, input=input)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        log_path: str,
        cwd: str | None = None,
    ) -> int:
        return self.inner.spawn(argv, env=env, log_path=log_path, cwd=cwd)

    def put(self, data: bytes, path: str, mode: int = 0o644) -> None:
        self.inner.put(data, path, mode)

    def put_file(self, local: Path, path: str, mode: int = 0o644) -> None:
        self.inner.put_file(local, path, mode)

    def get(self, path: str) -> bytes:
        return self.inner.get(path)


def model_transports(d: Deployment, looks: Mapping[str, NodeLook]) -> dict[str, Transport]:
    """The nodes' Transports for `model_findings`, the model fact answered from `looks`."""
    argv = model_fact_argv(d.recipe)
    out: dict[str, Transport] = {}
    for node in d.nodes:
        answer = looks[node].model if node in looks else None
        t = d.t(node)
        out[node] = Answered(t, argv, answer) if argv is not None and answer is not None else t
    return out
