"""Per-node systemd unit `deskside-<recipe>.service`.

- container runtime (docs/flagship.md #33): `Type=oneshot` + `RemainAfterExit=yes`
  around `docker compose up -d` / `down`; Docker itself keeps the container running
  (`restart: unless-stopped`), the unit is the bookkeeping that brings it back at boot.
- native runtime: a plain service running launch.sh (in the node's network namespace when
  the recipe puts it in one), restarted whenever it exits: a TP group whose peer restarted
  cannot be rejoined, so vLLM exits on its next collective and both sides start afresh. It
  carries the engine's memory limit (MemoryMax=, see RenderContext.memory_max) and a
  throttle point below it (MemoryHigh=, see `memory_high`). Stopping
  signals every process of the unit at once (systemd's default KillMode=control-group), as
  deskside stops a session it started: a worker rank waiting in a collective on a peer
  that is already gone would otherwise hold the stop until the SIGKILL timeout.

`docker`/`docker-compose` are named without a folder: systemd looks them up in its fixed
search path (/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin), wherever Docker lives.
"""

from __future__ import annotations

from deskside.render.context import NodeContext, RenderContext
from deskside.render.quote import systemd_command
from deskside.render.templates import render_template


def compose_command(ctx: RenderContext, *verb: str) -> list[str]:
    layout = ctx.layout
    return ctx.compose(layout.compose_project, f"{layout.current}/compose.yaml", *verb)


def memory_high(ctx: RenderContext) -> int | None:
    """MemoryHigh= of the native engine unit: halfway between the plan's vLLM budget and
    MemoryMax=. Past it the kernel throttles the engine and reclaims its memory (the page
    cache of weights read through it first) before the hard limit kills it; an engine
    within its budget is never throttled. None (no line) without a limit, without a planned
    budget, or with a limit at or under the budget.

    cgroup v2 only: on cgroup v1 systemd ignores MemoryHigh= and applies MemoryMax= as
    memory.limit_in_bytes (systemd >= 240, src/core/cgroup.c cgroup_context_apply), so the
    deprecated MemoryLimit= adds nothing."""
    limit, memory = ctx.memory_max, ctx.plan.memory
    if limit is None or memory is None or memory.vllm_budget_bytes >= limit:
        return None
    return limit - (limit - memory.vllm_budget_bytes) // 2


def render_unit(ctx: RenderContext, n: NodeContext) -> str:
    header = {
        "recipe_name": ctx.recipe.name,
        "recipe_file": ctx.recipe_file,
        "node_name": n.name,
        "role": n.launch.role,
        "node_rank": n.launch.node_rank,
    }
    if ctx.recipe.runtime.kind == "container":
        return render_template(
            "compose.service.j2",
            **header,
            up=systemd_command(compose_command(ctx, "up", "--detach", "--remove-orphans")),
            down=systemd_command(compose_command(ctx, "down")),
        )
    netns = f"/run/netns/{n.node.netns}" if n.node.netns else None
    return render_template(
        "native.service.j2",
        **header,
        start=systemd_command(["/bin/sh", f"{ctx.layout.current}/launch.sh"]),
        netns=netns,
        memory_max=ctx.memory_max,
        memory_high=memory_high(ctx),
        memlock=ctx.recipe.cluster.fabric.transport == "roce",
    )
