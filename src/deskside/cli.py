"""The `deskside` command: a thin face over the library. Each command parses its flags,
calls one library function, and prints a rich summary or, with --json, one JSON object."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

from deskside.errors import DesksideError, RecipeError, UsageError

app = typer.Typer(
    name="deskside",
    help="Serve frontier LLMs across a few deskside GPU nodes with vLLM - planned exactly, "
    "launched in order, and proven.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
model_app = typer.Typer(help="Model helpers (tiny local models for tests and demos).")
app.add_typer(model_app, name="model")

# --- sub-apps: one line each, `app.add_typer(<module>.app, name=...)` (imported lazily
# by their own modules; keep this block minimal so parallel work merges cleanly) ---
from deskside.fabric.cli import app as fabric_app  # noqa: E402

app.add_typer(fabric_app, name="fabric")
from deskside.bench.cli import app as bench_app  # noqa: E402

app.add_typer(bench_app, name="bench")
from deskside.render.cli import app as render_app  # noqa: E402

app.add_typer(render_app)  # `render` and `diff`, top-level
# --- end sub-apps ---

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def fail(error: DesksideError, as_json: bool = False) -> NoReturn:
    """Print a user-facing error (never a traceback) and exit with its code."""
    if as_json:
        emit_json(error.to_dict())
    elif isinstance(error, RecipeError):
        from deskside.recipe.load import format_recipe_error

        err.print(format_recipe_error(error), markup=False, highlight=False)
    else:
        where = f"{error.location}: " if error.location else ""
        err.print(f"[bold red]error:[/] {where}{error.message}", highlight=False)
        if error.hint:
            err.print(f"  [dim]hint:[/] {error.hint}", highlight=False)
    raise typer.Exit(error.exit_code)


# --------------------------------------------------------------------------- plan


@app.command()
def plan(
    recipe: Annotated[Path | None, typer.Argument(help="Recipe YAML to plan.")] = None,
    model_dir: Annotated[
        Path | None, typer.Option(help="Plan a model folder (its config.json) without a recipe.")
    ] = None,
    device: Annotated[str | None, typer.Option(help="gpu or cpu.")] = None,
    hardware: Annotated[
        str | None, typer.Option(help="Hardware profile (gb10, h100-80gb, h200-141gb, ...).")
    ] = None,
    kv_cache_memory: Annotated[
        str | None, typer.Option(help="Explicit KV cache memory per rank, e.g. 1GiB.")
    ] = None,
    max_model_len: Annotated[str | None, typer.Option(help="Context length, or 'auto'.")] = None,
    tp: Annotated[int | None, typer.Option(help="Tensor parallel size.")] = None,
    kv_cache_dtype: Annotated[str | None, typer.Option(help="KV cache dtype.")] = None,
    speculative: Annotated[
        str | None, typer.Option(help='Speculative config JSON, e.g. {"method":"mtp",...}.')
    ] = None,
    gpu_memory_utilization: Annotated[float | None, typer.Option()] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option()] = None,
    max_num_seqs: Annotated[int | None, typer.Option()] = None,
    block_size: Annotated[int | None, typer.Option()] = None,
    as_json: JsonFlag = False,
) -> None:
    """Plan memory exactly as vLLM will: KV blocks, tokens, concurrency, and refusals."""
    from deskside.planner.inputs import Overrides, plan_model_dir, plan_recipe
    from deskside.units import parse_bytes

    try:
        overrides = Overrides(
            device=device,
            hardware=hardware,
            kv_cache_memory=_parse(parse_bytes, kv_cache_memory, "--kv-cache-memory"),
            max_model_len=_parse_len(max_model_len),
            tensor_parallel_size=tp,
            kv_cache_dtype=kv_cache_dtype,
            speculative=_parse(json.loads, speculative, "--speculative"),
            gpu_memory_utilization=gpu_memory_utilization,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            block_size=block_size,
        )
        if device is not None and device not in ("gpu", "cpu"):
            raise UsageError(f"--device must be gpu or cpu, not {device!r}")
        if recipe is not None and model_dir is not None:
            raise UsageError("give a recipe or --model-dir, not both")
        if recipe is not None:
            from deskside.recipe.load import load_recipe

            result = plan_recipe(load_recipe(recipe), recipe, overrides)
        elif model_dir is not None:
            result = plan_model_dir(model_dir, overrides)
        else:
            raise UsageError(
                "nothing to plan", hint="deskside plan RECIPE, or deskside plan --model-dir DIR"
            )
    except DesksideError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(result.model_dump(mode="json"))
    else:
        from deskside.report import print_plan

        print_plan(out, result)
    if not result.fits:
        raise typer.Exit(3)


def _parse(fn: Any, value: str | None, flag: str) -> Any:
    if value is None:
        return None
    try:
        return fn(value)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def _parse_len(value: str | None) -> int | str | None:
    if value is None or value == "auto":
        return value
    try:
        n = int(value.replace(",", "").replace("_", ""))
    except ValueError:
        raise UsageError(f"--max-model-len must be a number or 'auto', not {value!r}") from None
    if n < 1:
        raise UsageError("--max-model-len must be at least 1")
    return n


# --------------------------------------------------------------------------- run


RecipeArg = Annotated[str, typer.Argument(help="Recipe file, or an embedded recipe's name.")]
RunOpt = Annotated[
    str | None, typer.Option("--recipe", help="Which run (recipe name), when several are up.")
]


@app.command()
def up(
    recipe: RecipeArg,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for readiness.")] = 900,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="ssh: nodes: stop after render and diff.")
    ] = False,
    known_hosts: Annotated[
        str | None,
        typer.Option(help="ssh: nodes: known_hosts file (default ~/.ssh/known_hosts)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Plan, then start every node (workers first, then the head) and wait until ready.
    Recipes with ssh: nodes are deployed over SSH (deskside.deploy), with rollback."""
    from deskside.home import resolve_recipe
    from deskside.planner.inputs import plan_recipe
    from deskside.runtime.native import up as start

    try:
        loaded, path = resolve_recipe(recipe)
        planned = plan_recipe(loaded, path)
        from deskside.deploy import is_remote

        if is_remote(loaded):
            from deskside import deploy_cli

            return deploy_cli.up(
                loaded,
                path,
                planned,
                dry_run=dry_run,
                known_hosts=known_hosts,
                timeout=timeout,
                as_json=as_json,
                out=out,
                err=err,
            )
        if dry_run:
            raise UsageError(
                "--dry-run applies to recipes with ssh: nodes",
                hint="for local recipes: deskside render RECIPE --out DIR / deskside diff RECIPE",
            )
        t0 = time.monotonic()
        with err.status("planning") as spinner:
            state = start(
                loaded,
                path,
                planned,
                timeout=timeout,
                progress=lambda msg: spinner.update(f"{msg} ({time.monotonic() - t0:.0f} s)"),
            )
    except DesksideError as exc:
        fail(exc, as_json)
    seconds = time.monotonic() - t0
    if as_json:
        emit_json({**state.model_dump(mode="json"), "startup_seconds": round(seconds, 1)})
        return
    out.print(f"[green]READY[/] {state.recipe_name} in {seconds:.0f} s: {state.api_url}")
    out.print(f"  serving: {', '.join(state.served_names)}")
    out.print(f"  planned: {state.planned_kv_cache_line}", highlight=False)
    out.print(f"  engine:  {state.logged_kv_cache_line}", highlight=False)


@app.command()
def down(run: RunOpt = None, as_json: JsonFlag = False) -> None:
    """Stop the run: SIGTERM, SIGKILL after a grace period; remove its shared memory and
    the namespaces it created."""
    from deskside.runtime.native import down as stop
    from deskside.runtime.native import load_state

    try:
        from deskside import deploy_cli
        from deskside.deploy import find_remote_run

        if (remote := find_remote_run(run)) is not None:
            return deploy_cli.down(remote, as_json, out, err)
        state = load_state(run)
        leftovers = stop(state)
    except DesksideError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json({"recipe": state.recipe_name, "stopped": not leftovers, "leftovers": leftovers})
    elif leftovers:
        err.print(f"[red]could not stop:[/] {', '.join(leftovers)}")
    else:
        out.print(f"{state.recipe_name}: down")
    if leftovers:
        raise typer.Exit(1)


@app.command()
def status(run: RunOpt = None, as_json: JsonFlag = False) -> None:
    """Per node: role, pid, state, memory; cluster READY / DEGRADED / DOWN; KV usage and
    requests from /metrics."""
    from deskside.runtime.native import load_state
    from deskside.runtime.native import status as probe

    try:
        from deskside import deploy_cli
        from deskside.deploy import find_remote_run

        if (remote := find_remote_run(run)) is not None:
            return deploy_cli.status(remote, as_json, out)
        st = probe(load_state(run))
    except DesksideError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(st.to_dict())
    else:
        from deskside.report import print_status

        print_status(out, st)
    if st.cluster != "READY":
        raise typer.Exit(1)


@app.command()
def logs(
    node: Annotated[str | None, typer.Argument(help="Node name (default: all).")] = None,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep printing.")] = False,
    lines: Annotated[int, typer.Option("-n", help="Lines from the end.")] = 40,
    run: RunOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Print (and follow) node logs."""
    from deskside.runtime.native import load_state

    try:
        from deskside import deploy_cli
        from deskside.deploy import find_remote_run

        if (remote := find_remote_run(run)) is not None:
            return deploy_cli.logs(remote, node, follow, lines, as_json)
        state = load_state(run)
        chosen = [n for n in state.nodes if node in (None, n.name)]
        if not chosen:
            raise UsageError(
                f"no node {node!r}", hint="nodes: " + ", ".join(n.name for n in state.nodes)
            )
    except DesksideError as exc:
        fail(exc)
    if as_json:
        emit_json(
            {
                n.name: (
                    Path(n.log).read_text(errors="replace").splitlines()[-lines:]
                    if Path(n.log).exists()
                    else []
                )
                for n in chosen
            }
        )
        return
    offsets = {}
    for n in chosen:
        text = Path(n.log).read_text(errors="replace") if Path(n.log).exists() else ""
        for line in text.splitlines()[-lines:]:
            sys.stdout.write(f"[{n.name}] {line}\n" if len(chosen) > 1 else f"{line}\n")
        offsets[n.log] = len(text.encode())
    while follow:
        time.sleep(0.5)
        for n in chosen:
            with open(n.log, "rb") as f:
                f.seek(offsets[n.log])
                chunk = f.read()
            offsets[n.log] += len(chunk)
            for line in chunk.decode(errors="replace").splitlines():
                sys.stdout.write(f"[{n.name}] {line}\n" if len(chosen) > 1 else f"{line}\n")
        sys.stdout.flush()


@app.command()
def demo(
    keep_up: Annotated[bool, typer.Option(help="Leave the cluster running.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """The embedded two-node run: tiny DeepSeek-V3 model, TP=2 across two local nodes with
    MTP speculative decoding, real chat completions, plan vs engine, then tear down."""
    from deskside.demo import run_demo

    t0 = time.monotonic()
    try:
        with err.status("starting") as spinner:
            result = run_demo(
                lambda msg: spinner.update(f"{msg} ({time.monotonic() - t0:.0f} s)"), keep_up
            )
    except DesksideError as exc:
        fail(exc, as_json)
    result["total_seconds"] = round(time.monotonic() - t0, 1)
    if as_json:
        emit_json(result)
        return
    from deskside.report import print_demo

    print_demo(out, result)


# --------------------------------------------------------------------------- schema


@app.command()
def schema() -> None:
    """Print the recipe JSON Schema (for editors)."""
    from deskside.recipe.schema import recipe_json_schema

    emit_json(recipe_json_schema())


@app.command()
def validate(recipe: Path, as_json: JsonFlag = False) -> None:
    """Load a recipe and report the first problems, located."""
    from deskside.recipe.load import load_recipe

    try:
        loaded = load_recipe(recipe)
    except DesksideError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(
            {"ok": True, "name": loaded.name, "nodes": [n.name for n in loaded.cluster.nodes]}
        )
    else:
        out.print(f"[green]ok[/] {recipe}: {loaded.name}, {len(loaded.cluster.nodes)} node(s)")


# --------------------------------------------------------------------------- model


@model_app.command("tiny")
def model_tiny(
    arch: Annotated[str, typer.Option(help="deepseek-v3, llama, qwen3 or gemma3.")] = "deepseek-v3",
    out_dir: Annotated[Path, typer.Option("--out", help="Folder to write.")] = Path("tiny-model"),
    as_json: JsonFlag = False,
) -> None:
    """Write a tiny model (config.json + a locally trained tokenizer) for vLLM's dummy
    weights: no downloads."""
    from deskside.tiny import ARCHS, write_tiny_model

    if arch not in ARCHS:
        fail(UsageError(f"unknown arch {arch!r}", hint="one of " + ", ".join(ARCHS)), as_json)
    path = write_tiny_model(arch, out_dir)
    if as_json:
        emit_json({"arch": arch, "path": str(path)})
    else:
        out.print(f"wrote tiny {arch} model to {path}")


def main() -> None:
    """Console entry point: user errors print without a traceback; internal errors say
    how to get one."""
    try:
        app()
    except DesksideError as exc:  # raised outside a command's own handling
        try:
            fail(exc)
        except typer.Exit as done:
            sys.exit(done.exit_code)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except Exception as exc:  # a bug of ours, not the user's mistake
        if os.environ.get("DESKSIDE_DEBUG"):
            traceback.print_exc()
        err.print(
            f"[bold red]internal error:[/] {type(exc).__name__}: {exc}\n"
            "  [dim]hint:[/] this is a deskside bug; rerun with DESKSIDE_DEBUG=1 for the "
            "traceback and report it",
            highlight=False,
        )
        sys.exit(70)


if __name__ == "__main__":
    main()
