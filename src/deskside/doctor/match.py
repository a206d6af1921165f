"""Nodes that must match: `deskside doctor` and the preflight of `deskside up` compare what
each node of a recipe runs (`deskside.doctor.match_facts`) and report what differs.

Two nodes of one engine exchange tensors through NCCL: both must load the same NCCL build
(an all-reduce between two builds can hang without an error), run the same NVIDIA driver
and CUDA, and the same vLLM (or image); their fabric interfaces need one MTU (larger frames
from one side are dropped by the other) and carrier. Any of these differing is a `problem`:
`up` refuses. A different kernel or deskside is a `warning`: it does not break the engine
by itself but usually means one node was updated and the other not. Clocks further apart
than `CLOCK_SKEW_LIMIT` are a problem too.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from deskside.deploy.preflight import node_python
from deskside.doctor.findings import Finding, Severity
from deskside.doctor.match_facts import NONE, MatchFacts, match_args, parse_match
from deskside.engine.launch import Site, node_env
from deskside.errors import DesksideError
from deskside.fabric.nccl import fabric_envs
from deskside.recipe.types import Node, Recipe
from deskside.render.lock import image_digest
from deskside.transport.base import Transport

# Time sync (chrony, systemd-timesyncd) keeps nodes on one network within milliseconds, so
# clocks a second apart mean a node does not sync; its engine log and metrics can then not
# be lined up with the other's when a hang is investigated, and the gap only grows. The
# measurement's own error (half the round trip, per node) is subtracted before comparing.
CLOCK_SKEW_LIMIT = 1.0  # seconds


@dataclass(frozen=True)
class NodeMatch:
    """One node's facts and its clock against this machine's."""

    node: str
    facts: MatchFacts
    skew: float | None = None  # node clock - midpoint of the local send and receive times
    skew_error: float = 0.0  # +- half the round trip


def measured(node: str, facts: MatchFacts, sent: float, received: float) -> NodeMatch:
    if facts.clock is None:
        return NodeMatch(node, facts)
    return NodeMatch(node, facts, facts.clock - (sent + received) / 2, (received - sent) / 2)


def _nccl(f: MatchFacts) -> str:
    if f.nccl == NONE:
        return "none found"
    return f"{f.nccl} sha256 {f.nccl_sha256}" + (
        f" ({f.nccl_file})" if f.nccl_file and f.nccl_file != f.nccl else ""
    )


@dataclass(frozen=True)
class Key:
    name: str
    title: str
    severity: Severity
    value: Callable[[MatchFacts], object]  # what is compared (None: unknown)
    shown: Callable[[MatchFacts], str]
    fix: str


KEYS: tuple[Key, ...] = (
    Key(
        "nccl",
        "NCCL library",
        "problem",
        lambda f: f.nccl_sha256 if f.nccl is not None else None,
        _nccl,
        "make every node load the same NCCL build: the same nvidia-nccl wheel in the "
        "engine's Python, or the same file at VLLM_NCCL_SO_PATH (compare with sha256sum)",
    ),
    Key(
        "driver",
        "NVIDIA driver",
        "problem",
        lambda f: f.driver,
        lambda f: str(f.driver),
        "install the same NVIDIA driver on every node and reboot "
        "(cat /proc/driver/nvidia/version shows it)",
    ),
    Key(
        "cuda",
        "CUDA version",
        "problem",
        lambda f: f.cuda,
        lambda f: str(f.cuda),
        "install the same NVIDIA driver on every node (it sets the CUDA version) and reboot",
    ),
    Key(
        "vllm",
        "vLLM",
        "problem",
        lambda f: f.vllm,
        lambda f: str(f.vllm),
        "install the recipe's vLLM version in the engine's Python on every node",
    ),
    Key(
        "mtu",
        "fabric MTU",
        "problem",
        lambda f: f.mtu,
        lambda f: f"{f.mtu} ({f.interface})",
        "set the same MTU on every fabric interface (ip link set dev IFACE mtu 9000, and in "
        "the network configuration); deskside fabric check RECIPE tests it",
    ),
    Key(
        "kernel",
        "kernel",
        "warning",
        lambda f: f.kernel,
        lambda f: str(f.kernel),
        "update every node to the same kernel and reboot",
    ),
    Key(
        "deskside",
        "deskside",
        "warning",
        lambda f: f.deskside,
        lambda f: str(f.deskside),
        "install the same deskside version on every node",
    ),
)


def _everyone(nodes: Sequence[NodeMatch]) -> str:
    return ", ".join(n.node for n in nodes)


def compare(nodes: Sequence[NodeMatch]) -> list[Finding]:
    """Findings for what differs between the nodes (pure): a `drift` per key, `clock` for
    clocks too far apart, `fabric` per node whose interface has no carrier, and one `match`
    info listing what is the same. Unknown values (None) are left out of a comparison."""
    if len(nodes) < 2:
        return []
    out: list[Finding] = []
    same: list[str] = []
    for key in KEYS:
        values = {n.node: key.value(n.facts) for n in nodes}
        if any(v is None for v in values.values()):
            continue
        if len(set(values.values())) == 1:
            same.append(f"{key.title} {key.shown(nodes[0].facts)}")
            continue
        shown = ", ".join(f"{n.node} {key.shown(n.facts)}" for n in nodes)
        out.append(
            Finding(
                kind="drift",
                node=_everyone(nodes),
                what=f"{key.title} differs: {shown}",
                severity=key.severity,
                fix=key.fix,
                detail={"key": key.name, "values": {k: str(v) for k, v in values.items()}},
            )
        )
    out += _clock_findings(nodes)
    for n in nodes:
        if n.facts.link_up is False:
            out.append(
                Finding(
                    kind="fabric",
                    node=n.node,
                    what=f"fabric interface {n.facts.interface} on {n.node} has no carrier",
                    severity="problem",
                    fix=f"ip link set dev {n.facts.interface} up, and check the cable; "
                    "deskside fabric check RECIPE tests the fabric",
                )
            )
    if same:
        out.append(
            Finding(
                kind="match",
                node=_everyone(nodes),
                what="the same on every node: " + "; ".join(same),
                severity="info",
            )
        )
    return out


def _clock_findings(nodes: Sequence[NodeMatch]) -> list[Finding]:
    timed = [n for n in nodes if n.skew is not None]
    if len(timed) < 2:
        return []
    early = min(timed, key=lambda n: n.skew or 0.0)
    late = max(timed, key=lambda n: n.skew or 0.0)
    assert early.skew is not None and late.skew is not None
    gap = late.skew - early.skew
    if gap - early.skew_error - late.skew_error <= CLOCK_SKEW_LIMIT:
        return []
    shown = ", ".join(f"{n.node} {n.skew:+.2f} s" for n in timed)
    return [
        Finding(
            kind="clock",
            node=_everyone(timed),
            what=f"clocks differ by {gap:.1f} s ({shown}, against this machine's)",
            severity="problem",
            fix="enable time sync on every node: timedatectl set-ntp true "
            "(chronyc tracking or timedatectl show the offset)",
            detail={"skew_seconds": {n.node: round(n.skew or 0.0, 3) for n in timed}},
        )
    ]


# --------------------------------------------------------------------------- gathering


def default_site(recipe: Recipe, recipe_path: Path) -> Site:
    """Where the engines run: deployed nodes, or this machine for a recipe without ssh:."""
    if any(n.ssh is not None for n in recipe.cluster.nodes):
        return Site.deployed(recipe, recipe_path)
    return Site.this_machine(recipe, recipe_path, sys.executable, str(recipe_path.parent))


def node_args(recipe: Recipe, node: Node, engine_env: Mapping[str, str], python: str) -> list[str]:
    """The match script's `sh -c` arguments for `node` (see `match_facts.match_args`): the
    engine's Python and NCCL on the node natively; in a container both come with the image."""
    native = recipe.runtime.kind == "native"
    return match_args(
        python=python if native else None,
        engine_env=engine_env,
        nccl=native,
        interface=node.fabric.interface if node.fabric else None,
    )


def with_image(recipe: Recipe, facts: MatchFacts) -> MatchFacts:
    """In a container the image pins vLLM (and the NCCL it loads): the digest stands for it."""
    if recipe.runtime.kind != "container" or facts.kernel is None:
        return facts
    return replace(facts, vllm=f"image {image_digest(recipe.engine.image) or recipe.engine.image}")


def must_match(
    recipe: Recipe,
    recipe_path: Path,
    transports: Mapping[str, Transport],
    *,
    site: Site | None = None,
    clock: Callable[[], float] = time.time,
) -> list[Finding]:
    """Read every node (in parallel) and compare (`compare`); a node that cannot be read is
    a problem naming it. One node: nothing to compare."""
    nodes = recipe.cluster.nodes
    if len(nodes) < 2:
        return []
    site = site or default_site(recipe, recipe_path)
    envs = {n: dict(f.env) for n, f in fabric_envs(recipe).items()}
    python = site.python

    def read(node: Node) -> NodeMatch | Finding:
        env = node_env(recipe, node, site, envs[node.name])
        argv = ["sh", "-c", *node_args(recipe, node, env, python)]
        try:
            sent = clock()
            r = transports[node.name].run(argv, timeout=120)
            received = clock()
        except DesksideError as exc:
            return _unreachable(node.name, exc.message, exc.hint)
        if not r.ok:
            why = (r.stderr or r.stdout).strip()[-300:] or f"exit {r.rc}"
            return _unreachable(node.name, why, None)
        facts = with_image(recipe, parse_match(r.stdout, node))
        return measured(node.name, facts, sent, received)

    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        results = list(pool.map(read, nodes))
    failed = [r for r in results if isinstance(r, Finding)]
    read_ok = [r for r in results if isinstance(r, NodeMatch)]
    return failed + compare(read_ok)


def preflight_args(recipe: Recipe, node: Node, engine_env: Mapping[str, str]) -> list[str]:
    """What the deploy's preflight appends to its facts round trip (`facts_command(then=)`):
    the match script, or nothing for a single node (nothing to compare)."""
    if len(recipe.cluster.nodes) < 2:
        return []
    return node_args(recipe, node, engine_env, node_python(recipe))


def read_preflight(
    recipe: Recipe, node: Node, stdout: str, sent: float, received: float
) -> NodeMatch:
    """A node's facts from the preflight's output (the `match.` lines among the others)."""
    return measured(node.name, with_image(recipe, parse_match(stdout, node)), sent, received)


def refusal(findings: Sequence[Finding], recipe_path: Path) -> tuple[list[Finding], list[str]]:
    """For `up`'s preflight: the problems (each one's fix followed by where to see the whole
    list) and the warnings as notes; `info` is left to `deskside doctor`."""
    more = f"`deskside doctor {recipe_path}` shows everything the nodes must share"
    problems = [
        replace(f, fix=f"{f.fix}; {more}" if f.fix else more)
        for f in findings
        if f.severity == "problem"
    ]
    notes = [
        f"{f.what} ({f.fix})" if f.fix else f.what for f in findings if f.severity == "warning"
    ]
    return problems, notes


def refusal_text(problems: Sequence[Finding]) -> tuple[str, str]:
    """The message and hint `up` refuses with (the runtime on this machine)."""
    lines = [f"{f.node}: {f.what}" for f in problems]
    hints = [f.fix for f in problems if f.fix]
    return (
        "the nodes differ in what they must share:\n  " + "\n  ".join(lines),
        "\n  ".join(dict.fromkeys(hints)),
    )


def _unreachable(node: str, why: str, hint: str | None) -> Finding:
    return Finding(
        kind="unreachable",
        node=node,
        what=f"{node} could not be read: {why}",
        severity="problem",
        fix=hint or f"check that {node} is up and reachable (ssh), then run doctor again",
    )
