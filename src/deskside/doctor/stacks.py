"""Other stacks on a node for `deskside doctor`: running Docker containers (with their
memory, from `docker stats --no-stream`) that are not this recipe's Compose projects, and
active systemd services named like an engine or like another recipe's deskside unit.

Best effort: the scan (`scan_command`, POSIX sh) gives Docker and systemd a few seconds
each and says when either does not answer. Parsing and judging are pure. An engine the
process scan already reported (`deskside.doctor.procs`) is not reported again here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from deskside.doctor.findings import Finding
from deskside.records.node import SERVICE_NAMES
from deskside.units import format_bytes

SCAN_SH = r"""
if command -v docker >/dev/null 2>&1; then
  if ps_out=$(timeout 10 docker ps --no-trunc --format '{{json .}}' 2>/dev/null); then
    echo "docker 1"
    printf '%s\n' "$ps_out" | sed -n 's/^{/ps {/p'
    timeout 20 docker stats --no-stream --no-trunc --format '{{json .}}' 2>/dev/null \
      | sed -n 's/^{/stats {/p'
  else
    echo "docker 0"
  fi
fi
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  echo "systemd 1"
  timeout 10 systemctl list-units --type=service --state=active --no-legend --plain \
    --no-pager 2>/dev/null | awk '{ print "unit " $1 }'
fi
"""

# what an engine's container image, container or unit is usually called
ENGINE_WORDS = re.compile(
    r"vllm|sglang|llama|ollama|trtllm|tensorrt|text-generation|tgi|triton|lmdeploy|llm",
    re.IGNORECASE,
)


def scan_command() -> list[str]:
    return ["sh", "-c", SCAN_SH]


@dataclass(frozen=True)
class Container:
    id: str  # full id
    name: str
    image: str
    project: str | None  # its Compose project (label com.docker.compose.project)
    memory_bytes: int | None  # from docker stats; None when it did not answer


@dataclass(frozen=True)
class StackScan:
    docker: bool | None  # None: no docker program; False: the daemon does not answer
    containers: list[Container]
    systemd: bool
    units: list[str]


_UNITS = {
    "B": 1,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "TB": 1000**4,
    "KIB": 1024,
    "MIB": 1024**2,
    "GIB": 1024**3,
    "TIB": 1024**4,
}


def parse_size(text: str) -> int | None:
    """Docker's sizes: `1.5GiB`, `512MiB`, `12.3MB`, `0B`."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]+)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        return None
    try:
        return int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    except ValueError:
        return None


def _labels(text: str) -> dict[str, str]:
    out = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep:
            out[key.strip()] = value
    return out


def parse_scan(text: str) -> StackScan:
    docker: bool | None = None
    systemd = False
    rows: list[dict[str, str]] = []
    memory: dict[str, int] = {}
    units: list[str] = []
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        if word == "docker":
            docker = rest.strip() == "1"
        elif word == "systemd":
            systemd = True
        elif word == "unit" and rest.strip():
            units.append(rest.strip())
        elif word in ("ps", "stats"):
            try:
                item = json.loads(rest)
            except ValueError:
                continue
            if not isinstance(item, dict):
                continue
            if word == "ps":
                rows.append({k: str(v) for k, v in item.items()})
            else:
                used = str(item.get("MemUsage", "")).split("/")[0]
                size = parse_size(used)
                if size is not None:
                    memory[str(item.get("ID", ""))] = size
    containers = []
    for row in rows:
        cid = row.get("ID", "")
        mem = next((v for k, v in memory.items() if k and cid.startswith(k)), None)
        containers.append(
            Container(
                id=cid,
                name=row.get("Names", ""),
                image=row.get("Image", ""),
                project=_labels(row.get("Labels", "")).get("com.docker.compose.project"),
                memory_bytes=mem,
            )
        )
    return StackScan(docker, containers, systemd, units)


def own_projects(recipe_name: str) -> set[str]:
    """This recipe's Compose projects: the engine's, the cluster services' and the
    monitoring's (`deskside.render.services`)."""
    base = f"deskside-{recipe_name}"
    return {base, f"{base}-cluster", f"{base}-monitoring"}


def own_units(recipe_name: str) -> set[str]:
    """This recipe's units: the engine's and its services' (`deskside.render.units`)."""
    base = f"deskside-{recipe_name}"
    return {f"{base}.service", *(f"{base}-{s}.service" for s in SERVICE_NAMES)}


BIG = 1 << 30  # a container holding this much is worth a warning whatever it is


def stack_findings(
    scan: StackScan,
    node: str,
    recipe_name: str,
    covered_containers: set[str],
    covered_units: set[str],
) -> list[Finding]:
    """Containers and units of other stacks. `covered_*`: containers (id prefixes) and
    units the engine scan already reported."""
    out = []
    if scan.docker is False:
        out.append(
            Finding(
                "docker",
                node,
                "Docker is installed but its daemon did not answer: containers not checked",
                severity="info",
            )
        )
    mine = own_projects(recipe_name)
    for c in scan.containers:
        if c.project in mine or any(c.id.startswith(k) for k in covered_containers if k):
            continue
        engine_like = bool(ENGINE_WORDS.search(f"{c.name} {c.image}"))
        mem = c.memory_bytes or 0
        held = "memory unknown" if c.memory_bytes is None else f"{format_bytes(mem)} RAM"
        stop = (
            f"docker compose --project-name {c.project} down"
            if c.project
            else f"docker stop {c.name or c.id[:12]}"
        )
        out.append(
            Finding(
                "container",
                node,
                f"container {c.name} ({c.image}): {held}",
                reclaimable_bytes=mem,
                severity="warning" if engine_like or mem >= BIG else "info",
                fix=stop,
                detail={"id": c.id[:12], "image": c.image, "project": c.project},
            )
        )
    ours = own_units(recipe_name)
    for unit in scan.units:
        if unit in ours or unit in covered_units:
            continue
        other_recipe = unit.startswith("deskside-")
        if not other_recipe and not ENGINE_WORDS.search(unit.removesuffix(".service")):
            continue
        what = "a unit of another deskside recipe" if other_recipe else "named like an engine"
        out.append(
            Finding(
                "unit",
                node,
                f"systemd service {unit} is active ({what})",
                severity="warning",
                fix=f"systemctl disable --now {unit}",
                detail={"unit": unit},
            )
        )
    return out
