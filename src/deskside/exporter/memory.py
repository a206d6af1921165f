"""Memory of the node: MemTotal and MemAvailable from `<proc-root>/meminfo` (bytes), and
the safety floor the plan keeps free on it.

On a unified-memory node (GB10) CPU and GPU share this memory: MemAvailable falling under
the floor is the warning before the host freezes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from deskside.hardware import PROFILES
from deskside.recipe.types import Node, Recipe
from deskside.smallfile import read_small_file

MEMINFO_LIMIT = 64 << 10  # /proc/meminfo is ~1.5 KiB
KIB = 1024


@dataclass(frozen=True)
class MemInfo:
    total_bytes: int
    available_bytes: int

    @property
    def used_bytes(self) -> int:
        return max(self.total_bytes - self.available_bytes, 0)


def parse_meminfo(text: str) -> MemInfo | None:
    """MemTotal and MemAvailable (kB in the file, bytes here); None when either is missing."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if not sep or key not in ("MemTotal", "MemAvailable"):
            continue
        number, _, unit = rest.strip().partition(" ")
        if not number.isdigit():
            continue
        values[key] = int(number) * (KIB if unit.strip() == "kB" else 1)
    if "MemTotal" not in values or "MemAvailable" not in values:
        return None
    return MemInfo(values["MemTotal"], values["MemAvailable"])


def read_meminfo(proc_root: Path) -> MemInfo | None:
    """`<proc-root>/meminfo`, or None when it is unreadable or lacks the two lines."""
    try:
        data = read_small_file(proc_root / "meminfo", MEMINFO_LIMIT)
    except OSError:
        return None
    return parse_meminfo(data.decode(errors="replace"))


def floor_bytes(recipe: Recipe, recipe_path: Path, node: Node) -> int:
    """The plan's safety floor for `node`: what `deskside plan` reports as
    memory.safety_floor_bytes (the recipe's guard.min_headroom, else the hardware profile's
    floor). A node whose hardware differs from the head's, a plan without a memory section
    (CPU profiles) or a plan that cannot be made (no model config here) gets the same rule
    applied to the node's own hardware profile."""
    from deskside.errors import DesksideError
    from deskside.planner.inputs import plan_recipe

    if node.hardware == recipe.head.hardware:
        try:
            plan = plan_recipe(recipe, recipe_path)
        except DesksideError:
            plan = None
        if plan is not None and plan.memory is not None:
            return plan.memory.safety_floor_bytes
    if recipe.guard.min_headroom is not None:
        return int(recipe.guard.min_headroom)
    return PROFILES[node.hardware].safety_floor_bytes
