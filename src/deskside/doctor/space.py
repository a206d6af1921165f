"""Disk, ports and the memory sum for `deskside doctor`: pure judges of facts read on the
nodes (`deskside.facts`: free disk and what a folder holds, the listening ports and who
holds them, MemAvailable).
"""

from __future__ import annotations

from collections.abc import Mapping

from deskside.doctor.findings import Finding
from deskside.facts.network import UNNAMED
from deskside.units import format_bytes


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
        holder = holders.get(port, UNNAMED)
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
