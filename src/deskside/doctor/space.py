"""Disk, ports and the memory sum for `deskside doctor`. Pure judges of facts gathered
elsewhere: free disk and listening ports come from preflight's facts
(`deskside.deploy.preflight.facts_command`), the holder of a port from `ss -ltnp`
(`holders_command`), MemAvailable from the process scan.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from deskside.doctor.findings import Finding
from deskside.units import format_bytes

# Per port, the listening sockets and their processes (`users:(("name",pid=N,fd=M))`), in
# the namespace the engine binds in; nothing when ss is missing.
HOLDERS_SH = r"""
command -v ss >/dev/null 2>&1 || exit 0
for port in "$@"; do
  ss -ltnpH "sport = :$port" 2>/dev/null | sed "s/^/port $port /"
done
"""

# The bytes a model already holds in the Hugging Face cache (`$1`, a folder of it), so a
# download needs only the rest.
HELD_SH = r"""
[ -d "$1" ] || { echo "held_kib=0"; exit 0; }
du -skL -- "$1" 2>/dev/null | awk '{ print "held_kib=" $1 }'
"""


def holders_command(ports: list[int]) -> list[str]:
    return ["sh", "-c", HOLDERS_SH, "sh", *(str(p) for p in ports)]


def parse_holders(text: str) -> dict[int, str]:
    """port -> who listens there (`name pid N`, several joined by `, `)."""
    out: dict[int, list[str]] = {}
    for line in text.splitlines():
        parts = line.split(" ", 2)
        if len(parts) < 3 or parts[0] != "port" or not parts[1].isdigit():
            continue
        who = [f"{n} pid {p}" for n, p in re.findall(r'\("([^"]*)",pid=([0-9]+)', parts[2])]
        out.setdefault(int(parts[1]), []).extend(who or ["a process ss cannot name"])
    return {port: ", ".join(dict.fromkeys(who)) for port, who in out.items()}


def held_command(folder: str) -> list[str]:
    return ["sh", "-c", HELD_SH, "sh", folder]


def parse_held(text: str) -> int:
    for word in text.split():
        if word.startswith("held_kib=") and word[9:].isdigit():
            return int(word[9:]) * 1024
    return 0


def hf_model_folder(hf_cache: str, repo: str) -> str:
    """Where huggingface_hub keeps `repo` (huggingface_hub.file_download: hub/models--org--name)."""
    return f"{hf_cache.rstrip('/')}/hub/models--{repo.replace('/', '--')}"


def port_findings(
    node: str,
    listening: frozenset[int],
    ports: Mapping[int, str],
    holders: Mapping[int, str],
    where: str,
) -> list[Finding]:
    """A problem per port the engine must bind that something already listens on."""
    out = []
    for port, what in sorted(ports.items()):
        if port not in listening:
            continue
        holder = holders.get(port, "a process ss cannot name")
        out.append(
            Finding(
                "port-taken",
                node,
                f"port {port} ({what}) is already taken {where} by {holder}",
                severity="problem",
                fix=f"stop what listens there (ss -ltnp 'sport = :{port}'), or pick another "
                "port in the recipe",
                detail={"port": port, "holder": holder},
            )
        )
    return out


def disk_finding(
    node: str, folder: str, free_bytes: int | None, need_bytes: int, what: str
) -> Finding | None:
    """A warning when `folder` has less than `need_bytes` free for `what`."""
    if free_bytes is None or free_bytes >= need_bytes:
        return None
    return Finding(
        "disk-short",
        node,
        f"{format_bytes(free_bytes)} free under {folder}, {format_bytes(need_bytes)} needed "
        f"for {what}",
        severity="warning",
        fix="free disk space there (old images: docker image prune -a; old weights: hf "
        "cache delete), or point the recipe at a larger disk",
        detail={"folder": folder, "free_bytes": free_bytes, "need_bytes": need_bytes},
    )


def memory_finding(
    node: str,
    total: int,
    available: int,
    need: int,
    reclaimable: int,
) -> Finding | None:
    """A warning when MemAvailable is short of what the plan needs but what doctor found
    would cover it; a problem when even that is not enough."""
    if available >= need:
        return None
    short = need - available
    enough = available + reclaimable >= need
    text = (
        f"{format_bytes(available)} of {format_bytes(total)} available, the plan needs "
        f"{format_bytes(need)} (its memory and the floor): {format_bytes(short)} short"
    )
    if enough:
        text += f"; the {format_bytes(reclaimable)} reclaimable above would cover it"
    else:
        text += f", and the {format_bytes(reclaimable)} reclaimable above would not cover it"
    return Finding(
        "memory-short",
        node,
        text,
        severity="warning" if enough else "problem",
        fix="stop or remove what is listed above"
        if enough
        else "stop other work on the node, or plan for less memory (engine.gpu_memory_"
        "utilization, engine.kv_cache_memory)",
        detail={"available_bytes": available, "need_bytes": need, "total_bytes": total},
    )
