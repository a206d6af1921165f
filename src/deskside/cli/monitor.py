"""`deskside monitor check RECIPE` and `deskside top [RECIPE]`: a thin face over
`deskside.monitor`. `app` is the `monitor` group; `top` is registered top-level."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from deskside.cli.common import JsonFlag, RecipeArg, RunArg, emit_json, fail, out
from deskside.errors import DesksideError, UsageError

if TYPE_CHECKING:
    from deskside.monitor.top import Watcher

app = typer.Typer(
    help="Check the cluster's monitoring against the live Prometheus.", no_args_is_help=True
)

PrometheusOpt = Annotated[
    str | None,
    typer.Option(
        "--prometheus",
        help="Prometheus's URL (default: the recipe's, http://<head address>:<prometheus_port>).",
    ),
]


@app.command("check")
def check(recipe: RecipeArg, prometheus: PrometheusOpt = None, as_json: JsonFlag = False) -> None:
    """Evaluate every dashboard query and alert rule of RECIPE against the live Prometheus
    and say, for each, whether it has data and, if not, why: a target is down, nobody
    exports a series (no GPU or no RDMA device on this machine, or a missing exporter), no
    traffic yet, or no data. An alert rule has data when every series it reads has data
    (its expression is empty while it does not fire); FIRING marks the ones whose condition
    holds now.

    Exits 0 when every expression has data or lacks it for a declared reason (no GPU or no
    RDMA device on this machine); 1 otherwise, and when Prometheus does not answer."""
    from deskside.home import resolve_recipe
    from deskside.monitor.check import check as run_check
    from deskside.monitor.prom_api import Prometheus, PrometheusUnreachable
    from deskside.monitor.sources import rendered
    from deskside.monitor.top import prometheus_url
    from deskside.monitor.view import check_table
    from deskside.planner.inputs import plan_recipe
    from deskside.recipe.groups import refuse_replica_set

    try:
        loaded, path = resolve_recipe(recipe)
        refuse_replica_set(loaded, "monitor check")
        monitoring = rendered(loaded, path, plan_recipe(loaded, path))
        with Prometheus(prometheus or prometheus_url(loaded)) as prom:
            try:
                report = run_check(
                    prom,
                    monitoring.expressions,
                    scrape_interval=monitoring.scrape_interval,
                    jobs=monitoring.jobs,
                    rdma_expected=loaded.cluster.fabric.transport == "roce",
                    recipe=loaded.name,
                )
            except PrometheusUnreachable as exc:
                if prometheus is None and not loaded.monitoring.enabled:
                    exc.hint = (
                        f"recipe {loaded.name} has monitoring switched off: set "
                        "monitoring.enabled: true and run `deskside up` again, or point at a "
                        "running Prometheus with --prometheus URL"
                    )
                raise
    except DesksideError as exc:
        fail(exc, as_json)
    if as_json:
        emit_json(report.to_dict())
    else:
        out.print(check_table(report), highlight=False)
    if not report.ok:
        raise typer.Exit(1)


def top(
    recipe: RunArg = None,
    once: Annotated[bool, typer.Option("--once", help="Print one snapshot and exit.")] = False,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print snapshots as JSON, one object a line."),
    ] = False,
    interval: Annotated[
        float,
        typer.Option(
            "--interval",
            help="Seconds between snapshots (and between the "
            "two scrapes a rate needs without Prometheus).",
        ),
    ] = 2.0,
    prometheus: PrometheusOpt = None,
) -> None:
    """A live view of the running cluster: per node memory available, floor and headroom,
    GPU, fabric traffic and errors, GID index and drift; the engine's KV cache, requests,
    tokens per second and speculative acceptance; the alerts firing. Reads Prometheus when
    it answers, else every /metrics endpoint directly."""
    from deskside.monitor.top import Watcher, target_of
    from deskside.records.names import find_run, recipe_file_named
    from deskside.records.recipes import load_run_recipe, run_recipe

    try:
        if not 0.1 <= interval <= 3600:
            raise UsageError("--interval must be between 0.1 and 3600 seconds")
        run = find_run(recipe)
        given = recipe_file_named(recipe) if recipe is not None else None
        loaded = run_recipe(run, given)[0] if given is not None else load_run_recipe(run)
        target = target_of(run, loaded, prometheus)
        watcher = Watcher(target, interval=interval)
    except DesksideError as exc:
        fail(exc, as_json)
    try:
        if once or as_json:
            _print(watcher, once, as_json, interval)
        else:
            _live(watcher, interval)
    finally:
        watcher.close()


def _print(watcher: Watcher, once: bool, as_json: bool, interval: float) -> None:
    from deskside.monitor.view import top_view

    while True:
        snap = watcher.snapshot()
        if as_json:
            emit_json(snap.model_dump(mode="json"), indent=None if not once else 2)
        else:
            out.print(top_view(snap), highlight=False)
        if once:
            return
        time.sleep(interval)


def _live(watcher: Watcher, interval: float) -> None:
    from rich.live import Live

    from deskside.monitor.view import top_view

    with Live(top_view(watcher.snapshot()), console=out, auto_refresh=False) as live:
        while True:
            time.sleep(interval)
            live.update(top_view(watcher.snapshot()), refresh=True)
