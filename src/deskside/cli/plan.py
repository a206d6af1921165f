"""`deskside plan`: vLLM's memory accounting for a recipe or a model folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from deskside.cli.common import JsonFlag, emit_json, fail, out, parse_option
from deskside.errors import DesksideError, UsageError
from deskside.terminal import shown

if TYPE_CHECKING:
    from deskside.planner.inputs import Overrides
    from deskside.recipe.types import Recipe


def plan(
    recipe: Annotated[
        str | None, typer.Argument(help="Recipe file, or an embedded recipe's name.")
    ] = None,
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
    vllm_version: Annotated[
        str | None,
        typer.Option(
            help="Plan for this vLLM release's accounting (default: the recipe's "
            "engine.vllm_version, else 0.32.0). Releases 0.25 (the DSpark overlay engine) to "
            "0.32 are modelled; another is planned with the nearest one's rules, and the plan "
            "says so."
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Plan memory exactly as vLLM will: KV blocks, tokens, concurrency, and refusals."""
    from deskside.home import resolve_recipe
    from deskside.planner.inputs import Overrides, plan_model_dir, plan_recipe
    from deskside.units import parse_bytes

    try:
        overrides = Overrides(
            device=device,
            hardware=hardware,
            kv_cache_memory=parse_option(parse_bytes, kv_cache_memory, "--kv-cache-memory"),
            max_model_len=_parse_len(max_model_len),
            tensor_parallel_size=tp,
            kv_cache_dtype=kv_cache_dtype,
            speculative=parse_option(json.loads, speculative, "--speculative"),
            gpu_memory_utilization=gpu_memory_utilization,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            block_size=block_size,
            vllm_version=vllm_version,
        )
        if device is not None and device not in ("gpu", "cpu"):
            raise UsageError(f"--device must be gpu or cpu, not {device!r}")
        if recipe is not None and model_dir is not None:
            raise UsageError("give a recipe or --model-dir, not both")
        if recipe is not None:
            loaded, path = resolve_recipe(recipe)
            if loaded.replicas is not None:
                _plan_set(loaded, path, overrides, as_json)
                return
            result = plan_recipe(loaded, path, overrides)
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
        from deskside.cli.report import print_plan

        print_plan(out, result)
    if not result.fits:
        raise typer.Exit(3)


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


def _plan_set(loaded: Recipe, path: Path, overrides: Overrides, as_json: bool) -> None:
    """A replica set: every group's plan (exit 3 when one does not fit)."""
    from deskside.replicas.plans import plan_set, set_refusal

    plans = plan_set(loaded, path, overrides)
    refusal = set_refusal(plans)
    if as_json:
        emit_json(
            {
                "recipe": loaded.name,
                "fits": refusal is None,
                "refusal": refusal,
                "groups": {g: p.model_dump(mode="json") for g, p in plans.items()},
            }
        )
    else:
        from deskside.cli.report import print_plan

        for group, one in plans.items():
            out.print(f"[bold]group {shown(group)}[/]", highlight=False)
            print_plan(out, one)
    if refusal is not None:
        raise typer.Exit(3)
