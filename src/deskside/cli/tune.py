"""`deskside tune`: the feasible frontier of a recipe's engine settings (planned, no
engine), and a benchmark of frontier points that picks the one meeting the user's SLA."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from deskside.cli.common import JsonFlag, RecipeArg, emit_json, fail, out, steps
from deskside.errors import DesksideError, UsageError
from deskside.terminal import shown

if TYPE_CHECKING:
    from deskside.tune.frontier import Frontier
    from deskside.tune.points import Target


def tune(
    recipe: RecipeArg,
    frontier_only: Annotated[
        bool,
        typer.Option(
            "--frontier",
            help="Plan every point of the grid (no engine) and print which start, which are "
            "refused and why, and the Pareto frontier.",
        ),
    ] = False,
    max_model_len: Annotated[
        str | None,
        typer.Option(help="Context lengths, comma-separated (default: around the recipe's)."),
    ] = None,
    max_num_seqs: Annotated[
        str | None, typer.Option(help="Sequence caps, comma-separated.")
    ] = None,
    max_num_batched_tokens: Annotated[
        str | None, typer.Option(help="Batch budgets, comma-separated.")
    ] = None,
    kv_cache_dtype: Annotated[str | None, typer.Option(help="KV dtypes, comma-separated.")] = None,
    num_speculative_tokens: Annotated[
        str | None, typer.Option(help="Draft tokens, comma-separated (recipes that draft).")
    ] = None,
    gpu_memory_utilization: Annotated[
        str | None,
        typer.Option(
            help="Memory fractions, comma-separated (GPU recipes without kv_cache_memory; "
            "by default steps below the recipe's, never past the unified-memory floor)."
        ),
    ] = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="List every point, not only the frontier.")
    ] = False,
    sla: Annotated[
        str | None,
        typer.Option(
            help='Service levels every benchmarked point must meet, e.g. "ttft_p95<=2s,'
            'tpot_p50<=60ms" (metrics ttft, tpot, e2e; percentiles p50..p99).'
        ),
    ] = None,
    workload: Annotated[
        Path | None,
        typer.Option(
            help="A YAML or JSON file: prompt_lens, concurrency, max_tokens, requests "
            "(instead of the flags below)."
        ),
    ] = None,
    prompt_lens: Annotated[
        str | None, typer.Option(help="Workload prompt tokens, comma-separated.")
    ] = None,
    concurrency: Annotated[
        str | None, typer.Option(help="Workload concurrency levels, comma-separated.")
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option(help="Workload output tokens per request.")
    ] = None,
    requests: Annotated[
        int | None, typer.Option(help="Measured requests per cell (default 2 per slot, >= 4).")
    ] = None,
    max_starts: Annotated[
        int, typer.Option(help="Engine starts at most, in all (a resumed search included).")
    ] = 4,
    max_minutes: Annotated[
        float, typer.Option(help="Minutes at most, in all (a resumed search included).")
    ] = 60.0,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Folder of the search: its state (a rerun resumes it), the report, the plot "
            "and the winner's overlay (default: tune-RECIPE).",
        ),
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds each start may take to be ready.")] = 900,
    as_json: JsonFlag = False,
) -> None:
    """The feasible frontier of max_model_len x max_num_seqs x max_num_batched_tokens x KV
    dtype x draft tokens (x gpu_memory_utilization on unified memory), planned exactly as
    `deskside plan` plans each point; with --sla, the frontier points benchmarked one start
    at a time, the best under the SLA written as a recipe overlay for `deskside up
    --overlay`."""
    from deskside.home import resolve_recipe

    try:
        if frontier_only == (sla is not None):
            raise UsageError(
                "give --frontier, or --sla with a workload",
                hint="deskside tune RECIPE --frontier, or deskside tune RECIPE --sla "
                '"ttft_p95<=2s" --prompt-lens 256 --concurrency 1,4',
            )
        loaded, path = resolve_recipe(recipe)
        if loaded.replicas is not None:
            raise UsageError(
                f"{recipe}: a replica set is tuned group by group",
                hint="tune one group's recipe (a recipe without replicas)",
            )
        from deskside.tune.points import Target

        target = Target.of(loaded, path)
        axes = _axes(
            target,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            kv_cache_dtype=kv_cache_dtype,
            num_speculative_tokens=num_speculative_tokens,
            gpu_memory_utilization=gpu_memory_utilization,
        )
        if frontier_only:
            _frontier(target, axes, show_all, as_json)
            return
        assert sla is not None
        _search(
            target,
            axes,
            recipe_arg=recipe,
            sla=sla,
            workload=workload,
            prompt_lens=prompt_lens,
            concurrency=concurrency,
            max_tokens=max_tokens,
            requests=requests,
            max_starts=max_starts,
            max_minutes=max_minutes,
            out_dir=out_dir,
            timeout=timeout,
            as_json=as_json,
        )
    except DesksideError as exc:
        fail(exc, as_json)


def _axes(target: Target, **given: str | None) -> dict[str, tuple[Any, ...]]:
    from deskside.tune.grid import parse_axis

    kinds: dict[str, type] = {
        "max_model_len": int,
        "max_num_seqs": int,
        "max_num_batched_tokens": int,
        "kv_cache_dtype": str,
        "num_speculative_tokens": int,
        "gpu_memory_utilization": float,
    }
    axes: dict[str, tuple[Any, ...]] = {}
    base = target.base()
    for name, text in given.items():
        if text is None:
            continue
        flag = "--" + name.replace("_", "-")
        if name == "num_speculative_tokens" and base.num_speculative_tokens is None:
            raise UsageError(
                f"{flag}: the recipe does not draft (engine.speculative is not set)",
                hint="set engine.speculative in the recipe to tune its draft tokens",
            )
        if name == "gpu_memory_utilization" and base.gpu_memory_utilization is None:
            raise UsageError(
                f"{flag}: this recipe's KV cache memory is explicit (engine.kv_cache_memory "
                "or a CPU engine), so vLLM does not size it from a memory fraction",
                hint="tune the other settings, or drop engine.kv_cache_memory on a GPU recipe",
            )
        axes[name] = parse_axis(text, flag, kinds[name])
    return axes


def _frontier(
    target: Target, axes: dict[str, tuple[Any, ...]], show_all: bool, as_json: bool
) -> None:
    from deskside.tune.frontier import frontier

    with steps("planning the grid") as say:
        result = frontier(
            target.recipe,
            target.recipe_path,
            axes,
            progress=lambda n: say(f"planned {n:,} points"),
            target=target,
        )
    if as_json:
        emit_json(result.to_dict())
        return
    print_frontier(result, show_all)


def _gib(n: int) -> str:
    from deskside.units import GIB

    return f"{n / GIB:.2f}"


def print_frontier(result: Frontier, show_all: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    d = result.to_dict()["counts"]
    out.print(
        f"[bold]{shown(result.recipe)}[/]: {d['points']:,} points planned in "
        f"{result.seconds:.2f} s: {d['fit']:,} start, {d['refused_by_vllm']:,} refused by "
        f"vLLM, {d['refused_by_floor']:,} by the unified-memory floor; "
        f"{d['frontier']:,} on the frontier",
        highlight=False,
    )
    rows = result.points if show_all else result.on_frontier
    table = Table(title="every point" if show_all else "the frontier")
    headroom_of = rows[0].headroom_of if rows else "node"
    for col in (
        "context",
        "seqs",
        "batched",
        "KV dtype",
        "draft",
        "mem util",
        "KV tokens",
        "max conc.",
        "headroom GiB" if headroom_of == "node" else "KV spare GiB",
        "verdict",
    ):
        table.add_column(col, justify="left" if col in ("KV dtype", "verdict") else "right")
    own = result.recipe_settings
    for p in rows:
        s = p.settings
        verdict = (
            "frontier"
            if p.frontier
            else ("starts" if p.fits else "refused: " + ", ".join(p.refused_by))
        )
        if all(s.get(k) == v for k, v in own.items()):
            verdict += " (the recipe's)"
        table.add_row(
            f"{s['max_model_len']:,}",
            str(s["max_num_seqs"]),
            f"{s['max_num_batched_tokens']:,}",
            shown(s["kv_cache_dtype"]),
            "-" if s["num_speculative_tokens"] is None else str(s["num_speculative_tokens"]),
            "-" if s["gpu_memory_utilization"] is None else f"{s['gpu_memory_utilization']:.2f}",
            f"{p.kv_cache_tokens:,}",
            f"{p.max_concurrency:.2f}",
            _gib(p.headroom_bytes),
            verdict,
        )
    # off a terminal (a log, a pipe) the table keeps its natural width, not 80 columns
    wide = out if out.is_terminal else Console(file=out.file, width=240, emoji=False)
    wide.print(table)
    refusals = sorted({p.refusal.split(". ")[0] for p in result.points if p.refusal})
    if refusals and not show_all:
        out.print(
            f"[dim]{len(refusals)} kinds of refusal, e.g.:[/] {shown(refusals[0])}", highlight=False
        )


def _search(
    target: Target,
    axes: dict[str, tuple[Any, ...]],
    *,
    recipe_arg: str,
    sla: str,
    workload: Path | None,
    prompt_lens: str | None,
    concurrency: str | None,
    max_tokens: int | None,
    requests: int | None,
    max_starts: int,
    max_minutes: float,
    out_dir: Path | None,
    timeout: float,
    as_json: bool,
) -> None:
    from deskside.home import is_embedded
    from deskside.tune.frontier import frontier
    from deskside.tune.report import write_report
    from deskside.tune.search import Budget, Engine, Workload, load_workload, run_search
    from deskside.tune.sla import parse_sla

    levels = parse_sla(sla)
    if workload is not None:
        if prompt_lens or concurrency:
            raise UsageError("give --workload or --prompt-lens/--concurrency, not both")
        load = load_workload(workload)
    else:
        if not prompt_lens or not concurrency:
            raise UsageError(
                "the SLA search needs a workload",
                hint="--workload FILE, or --prompt-lens 256,2048 --concurrency 1,4",
            )
        from deskside.tune.grid import parse_axis

        load = Workload(
            prompt_lens=list(parse_axis(prompt_lens, "--prompt-lens", int)),
            concurrency=list(parse_axis(concurrency, "--concurrency", int)),
            max_tokens=max_tokens or 128,
            requests=requests,
        )
    if max_tokens is not None:
        load.max_tokens = max_tokens
    if requests is not None:
        load.requests = requests
    if max_starts < 1 or max_minutes <= 0:
        raise UsageError("--max-starts and --max-minutes must be positive")
    folder = out_dir or Path(f"tune-{target.recipe.name}")
    front = frontier(target.recipe, target.recipe_path, axes, target=target)
    with steps("tuning") as say:
        engine = Engine(target, timeout, is_embedded(recipe_arg), say)
        state = run_search(
            target, front, levels, load, folder, Budget(max_starts, max_minutes), engine, say
        )
    written = write_report(state, folder)
    if as_json:
        emit_json({**state.model_dump(mode="json"), "files": written})
    else:
        _print_search(state, written)
    if state.winner is None:
        raise typer.Exit(1)


def _print_search(state: Any, written: dict[str, str]) -> None:
    from deskside.tune.report import table

    out.print(table(state), markup=False, highlight=False)
    if state.winner is None:
        out.print("no benchmarked point met the SLA", highlight=False)
    else:
        out.print(f"chosen: {shown(state.winner)}", highlight=False)
    for kind, path in written.items():
        out.print(f"[dim]wrote {kind}:[/] {shown(path)}", highlight=False)
