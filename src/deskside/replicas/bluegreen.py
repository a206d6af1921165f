"""`deskside upgrade RECIPE` for a recipe without replicas (one engine group): a blue/green
restart when the nodes can hold a second copy of the engine beside the running one, and a
clear refusal when they cannot.

The memory decision (`green_room`), from the plans of the running recipe ("blue") and of
the new one ("green"), per node:

    GPU / unified memory   each copy takes what its plan gives vLLM on the device (its
                           budget: total x gpu_memory_utilization, or weights + non-KV +
                           kv_cache_memory) plus what it holds outside that budget (the
                           plan's total minus its headroom). Both copies and the safety
                           floor (guard.min_headroom, or the hardware's) must fit in the
                           device's total: vLLM refuses a start whose budget is over the
                           free memory (vllm/v1/worker/utils.py request_memory).
    CPU                    the plan sizes no device memory: a copy takes, per rank, its
                           weights + non-KV + the KV cache space (kv_cache_memory /
                           VLLM_CPU_KVCACHE_SPACE), which vLLM allocates only when the
                           machine has that much available (CPUWorker.
                           determine_available_memory). Green's ranks on one machine must
                           fit in that machine's available memory now (blue already
                           counted in it) less the safety floor.

When they cannot both fit (the flagship: one DeepSeek-V4-Flash per GB10 pair) the upgrade is
refused, with the numbers, before anything is touched: a replica set (`replicas:`) upgrades
with no request failing, or `deskside down` then `deskside up` with downtime.

The switch: clients reach a one-group recipe either through its LiteLLM proxy or straight
at the engine's port. Straight at the engine, green listens on another port, so a switch
cannot be hitless: it is refused (`allow_downtime` lifts that refusal for callers that
accept it; the CLI offers no such switch yet). Through the proxy, LiteLLM's upstreams are
fixed when it starts, so the proxy reaches the engine through a drain gate from `up` on
(`deskside.runtime.engine_gate`: the replica set's gate with the engine's two port slots
as its two "groups"); the upgrade starts green on the slot blue does not use, proves it,
drains blue's slot at the gate and stops blue (`deskside.replicas.bluegreen_run`). Chosen
because it reuses the set's gate, the runtime's launches and the set's proof unchanged, and
needs no change of LiteLLM's configuration after `up`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from deskside.errors import DesksideError
from deskside.hardware import get_profile
from deskside.planner.plan import Plan
from deskside.recipe.types import Recipe
from deskside.units import format_gib

HOW_INSTEAD = (
    "run it as a replica set (replicas: with two engine groups), which upgrades one group at "
    "a time with no request failing; or deskside down, then deskside up with the new recipe "
    "(the model does not serve in between)"
)


@dataclass(frozen=True)
class NodeRoom:
    """One node's (or, on CPU, one machine's) memory for blue and green together."""

    where: str  # node name, or "this machine (node0, node1)"
    total_bytes: int  # the device's total (GPU), or the memory available now (CPU)
    blue_bytes: int  # what the running copy takes (GPU); 0 on CPU (already in `total`)
    green_bytes: int  # what the new copy needs
    floor_bytes: int  # the safety floor left outside every engine
    fits: bool

    def text(self) -> str:
        if self.blue_bytes:
            return (
                f"{self.where}: the running engine takes {format_gib(self.blue_bytes)}, the "
                f"new one needs {format_gib(self.green_bytes)}, the safety floor is "
                f"{format_gib(self.floor_bytes)}: "
                f"{format_gib(self.blue_bytes + self.green_bytes + self.floor_bytes)} of "
                f"{format_gib(self.total_bytes)}"
            )
        return (
            f"{self.where}: the new engine needs {format_gib(self.green_bytes)} beside the "
            f"running one, the safety floor is {format_gib(self.floor_bytes)}: "
            f"{format_gib(self.green_bytes + self.floor_bytes)} of "
            f"{format_gib(self.total_bytes)} available now"
        )


@dataclass
class GreenRoom:
    """Whether green fits beside blue, node by node, and why (the numbers)."""

    fits: bool
    nodes: list[NodeRoom] = field(default_factory=list)
    reason: str | None = None  # when it does not fit: what does not, in numbers

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _gpu_room(node: str, blue: Plan, green: Plan) -> NodeRoom:
    bm, gm = blue.memory, green.memory
    assert bm is not None and gm is not None
    blue_bytes = bm.total_bytes - bm.headroom_bytes  # its budget and what it holds outside
    green_bytes = gm.total_bytes - gm.headroom_bytes
    floor = max(bm.safety_floor_bytes, gm.safety_floor_bytes)
    total = gm.total_bytes
    return NodeRoom(
        node, total, blue_bytes, green_bytes, floor, blue_bytes + green_bytes + floor <= total
    )


def rank_bytes(plan: Plan, node: str) -> int:
    """What the plan's ranks on `node` take on CPU: weights, non-KV and the KV cache space."""
    return sum(
        r.weights_bytes + r.non_kv_bytes + r.available_kv_bytes
        for r in plan.ranks
        if r.node == node
    )


def green_room(
    recipe: Recipe,
    blue: Plan,
    green: Plan,
    available: Mapping[str, int] | None = None,
    machine_of: Mapping[str, str] | None = None,
) -> GreenRoom:
    """Can `green` (the new recipe's plan) run beside `blue` (the running one's) on the
    recipe's nodes (see the module docstring)? On CPU, `available` is the memory available
    now per machine, `machine_of` a node's machine (default: the node itself)."""
    rooms: list[NodeRoom] = []
    floor = green.memory.safety_floor_bytes if green.memory else None
    if blue.memory is not None and green.memory is not None:
        rooms = [_gpu_room(n.name, blue, green) for n in recipe.cluster.nodes]
    else:
        if floor is None:
            floor = recipe.guard.min_headroom
        if floor is None:
            floor = get_profile(recipe.head.hardware).safety_floor_bytes
        machines: dict[str, list[str]] = {}
        for n in recipe.cluster.nodes:
            machines.setdefault((machine_of or {}).get(n.name, n.name), []).append(n.name)
        for machine, nodes in machines.items():
            need = sum(rank_bytes(green, n) for n in nodes)
            have = (available or {}).get(machine)
            where = machine if nodes == [machine] else f"{machine} ({', '.join(nodes)})"
            if have is None:
                rooms.append(NodeRoom(where, 0, 0, need, floor, False))
                continue
            rooms.append(NodeRoom(where, have, 0, need, floor, need + floor <= have))
    short = [r for r in rooms if not r.fits]
    if not short:
        return GreenRoom(True, rooms)
    unknown = [r.where for r in short if r.total_bytes == 0 and not r.blue_bytes]
    if unknown:
        reason = f"the memory available on {', '.join(unknown)} is unknown"
    else:
        reason = "; ".join(r.text() for r in short)
    return GreenRoom(False, rooms, f"a second copy of the engine does not fit: {reason}")


class NoRoom(DesksideError):
    """The nodes cannot hold green beside blue (or the switch cannot be hitless)."""

    exit_code = 2

    def __init__(self, message: str, hint: str, room: GreenRoom | None = None) -> None:
        super().__init__(message, hint)
        self.room = room

    def to_dict(self) -> dict[str, object]:
        data = super().to_dict()
        data["reason"] = self.room.reason if self.room is not None else self.message
        if self.room is not None:
            data["room"] = self.room.to_dict()
        return data


def available_now(recipe: Recipe, known_hosts: str | None) -> tuple[dict[str, int], dict[str, str]]:
    """The memory available now per machine (MemAvailable, or the memory cgroup's headroom
    when smaller) and each node's machine: nodes without `ssh:` are this machine."""
    from deskside.facts.memory import read_available
    from deskside.runtime.transports import transport_for
    from deskside.transport.local import LocalTransport

    machine_of: dict[str, str] = {}
    available: dict[str, int] = {}
    for n in recipe.cluster.nodes:
        machine = "this machine" if n.ssh is None else n.name
        machine_of[n.name] = machine
        if machine in available:
            continue
        t = LocalTransport() if n.ssh is None else transport_for(n, known_hosts)
        have = read_available(t, "/proc", None).available
        if have is not None:
            available[machine] = have
    return available, machine_of


def blue_green_refusal(
    recipe: Recipe, blue: Plan, green: Plan, known_hosts: str | None, allow_downtime: bool
) -> NoRoom | None:
    """Why `deskside upgrade` of a one-group recipe cannot do a blue/green restart (None:
    it can): the memory first, then the switch."""
    available: dict[str, int] = {}
    machine_of: dict[str, str] = {}
    if blue.memory is None or green.memory is None:
        available, machine_of = available_now(recipe, known_hosts)
    room = green_room(recipe, blue, green, available, machine_of)
    if not room.fits:
        return NoRoom(
            f"{recipe.name}: no blue/green restart: {room.reason}", hint=HOW_INSTEAD, room=room
        )
    if not recipe.runs_proxy and not allow_downtime:
        return NoRoom(
            f"{recipe.name}: clients reach the engine at its own port (proxy.enabled is "
            "false): the switch to the new copy moves that port, so requests fail while it "
            "moves",
            hint="enable the proxy (proxy.enabled: true) for a switch with no request "
            "failing, or deskside down, then deskside up with the new recipe",
        )
    return None


__all__ = [
    "HOW_INSTEAD",
    "GreenRoom",
    "NoRoom",
    "NodeRoom",
    "available_now",
    "blue_green_refusal",
    "green_room",
    "rank_bytes",
]
