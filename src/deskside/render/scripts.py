"""Per-node scripts: `launch.sh` (POSIX sh: environment, RoCE GID resolution, then `exec`
of the engine with the node's exact `NodeLaunch` args) and `node.env` (the same
environment for Compose's env_file)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from deskside.fabric.launch_sh import node_gid_snippet
from deskside.facts import RUN_TAG
from deskside.recipe.types import Node, Recipe
from deskside.render import quote
from deskside.render.context import NodeContext, RenderContext
from deskside.render.quote import env_file_value
from deskside.render.templates import render_template


def gid_resolution_snippet(node: Node, recipe: Recipe) -> str:
    """The sh lines that resolve and export NCCL_IB_GID_INDEX on `node` at start-up
    (`deskside.fabric.launch_sh`), or "" when the transport is not RoCE."""
    return node_gid_snippet(recipe, node) or ""


def _header(ctx: RenderContext, n: NodeContext) -> dict[str, object]:
    return {
        "recipe_name": ctx.recipe.name,
        "recipe_file": ctx.recipe_file,
        "node_name": n.name,
        "role": n.launch.role,
        "node_rank": n.launch.node_rank,
    }


def render_launch(ctx: RenderContext, n: NodeContext) -> str:
    snippet = gid_resolution_snippet(n.node, ctx.recipe) if n.gid_at_launch else ""
    return render_template(
        "launch.sh.j2",
        **_header(ctx, n),
        env=n.env,
        gid_snippet=snippet.rstrip("\n"),
        secret_env_file=n.launch.secret_env_file,
        command_lines=command_lines(n.launch.program, n.launch.args),
        run_tag_env=RUN_TAG,
        run_tag_prefix=f"{ctx.recipe.name}/{n.name}/",
    )


def _is_flag(arg: str) -> bool:
    return re.fullmatch(r"--?[A-Za-z][A-Za-z0-9_.-]*(=.*)?", arg, re.DOTALL) is not None


def command_lines(program: Sequence[str], args: Sequence[str]) -> list[str]:
    """The command quoted word by word: the program and the arguments before the first
    option on one line, then one line per option with its values (readable diffs)."""
    lines: list[list[str]] = [[quote.sh(word) for word in program]]
    for arg in args:
        if _is_flag(arg):
            lines.append([])
        lines[-1].append(quote.sh(arg))
    return [" ".join(words) for words in lines]


def env_file_lines(n: NodeContext) -> list[str]:
    lines = []
    for name, value in n.env:
        spelled = env_file_value(value)
        if spelled is None:
            lines.append(f"# {name}: set by launch.sh only (no env-file spelling for its value)")
        else:
            lines.append(f"{name}={spelled}")
    if n.gid_at_launch:
        lines.append("# NCCL_IB_GID_INDEX: resolved from sysfs by launch.sh at every start")
    return lines


def render_node_env(ctx: RenderContext, n: NodeContext) -> str:
    return render_template("node.env.j2", **_header(ctx, n), lines=env_file_lines(n))
