"""``deskside bench``: a thin face over :func:`deskside.bench.runner.run_bench`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from deskside.cli.common import JsonFlag, emit_json, err, fail
from deskside.cli.common import out as stdout_console
from deskside.errors import DesksideError, UsageError
from deskside.terminal import shown

app = typer.Typer(
    help="Benchmark an OpenAI-compatible server: prompt "
    "length x concurrency (or request rate, open loop) -> TTFT, prefill, decode and "
    "aggregate tok/s, plus the server's own counters (speculative acceptance, prefix cache, "
    "preemptions); multi-turn conversations; the backends behind a proxy.",
    no_args_is_help=False,
    invoke_without_command=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _ints(value: str | None, flag: str) -> list[int] | None:
    if value is None:
        return None
    try:
        out = [int(v.replace("_", "")) for v in value.replace(" ", "").split(",") if v]
    except ValueError:
        raise UsageError(f"{flag} takes comma-separated integers, not {value!r}") from None
    if not out or any(v < 1 for v in out):
        raise UsageError(f"{flag} needs positive integers, not {value!r}")
    return out


def _rates(value: str | None) -> list[float] | None:
    if value is None:
        return None
    try:
        out = [float(v) for v in value.replace(" ", "").split(",") if v]
    except ValueError:
        raise UsageError(f"--request-rate takes comma-separated numbers, not {value!r}") from None
    if not out or any(not v > 0 for v in out):
        raise UsageError(f"--request-rate needs positive rates, not {value!r}")
    return out


@app.callback()
def bench(
    ctx: typer.Context,
    url: Annotated[
        str | None, typer.Option(help="Server base URL (default: the running cluster).")
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Served model name (default: the server's first).")
    ] = None,
    endpoint: Annotated[str, typer.Option(help="chat or completions.")] = "chat",
    prompt_lens: Annotated[
        str | None, typer.Option(help="Prompt tokens, comma-separated (256,2048,8192,32768).")
    ] = None,
    concurrency: Annotated[
        str | None, typer.Option(help="Concurrency levels, comma-separated (1,2,4,6).")
    ] = None,
    requests: Annotated[
        int | None,
        typer.Option(help="Measured requests per cell (default 2 per slot, at least 4)."),
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option(
            help="Per-cell time budget in seconds (stops issuing); open loop: the schedule's "
            "length."
        ),
    ] = None,
    request_rate: Annotated[
        str | None,
        typer.Option(
            help="Open loop: requests per second, comma-separated, one cell each (instead of "
            "--concurrency); requests leave on schedule whatever the server does."
        ),
    ] = None,
    arrivals: Annotated[
        str, typer.Option(help="Open-loop gaps: poisson (random, seeded) or constant.")
    ] = "poisson",
    max_in_flight: Annotated[
        int | None,
        typer.Option(help="Open loop: drop a request due while this many are in flight."),
    ] = None,
    turns: Annotated[
        int, typer.Option(help="Turns per conversation; each resends the whole history.")
    ] = 1,
    conversations: Annotated[
        int | None,
        typer.Option(help="Conversations per cell with --turns (default: the concurrency)."),
    ] = None,
    slo_ttft: Annotated[
        float | None, typer.Option(help="Goodput objective: TTFT at most this many seconds.")
    ] = None,
    slo_tpot: Annotated[
        float | None, typer.Option(help="Goodput objective: TPOT at most this many seconds.")
    ] = None,
    slo_e2e: Annotated[
        float | None, typer.Option(help="Goodput objective: E2E at most this many seconds.")
    ] = None,
    warmup: Annotated[
        int | None, typer.Option(help="Warm-up requests per cell (default: concurrency).")
    ] = None,
    max_tokens: Annotated[int, typer.Option(help="Output tokens per request.")] = 256,
    ignore_eos: Annotated[
        bool, typer.Option(help="Send ignore_eos so every request decodes max_tokens.")
    ] = True,
    shared_prefix: Annotated[
        bool, typer.Option(help="Same prompt for every request of a cell (prefix cache hits).")
    ] = False,
    seed: Annotated[
        int | None, typer.Option(help="Prompt seed (default: fresh per run, recorded).")
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            help="Seconds each request may take in all (connecting, the streamed "
            "answer); a stream past 64 MiB or one event past 1 MiB also ends it."
        ),
    ] = 900.0,
    api_key: Annotated[
        str | None, typer.Option(envvar="DESKSIDE_API_KEY", help="Bearer token, if needed.")
    ] = None,
    tokenizer: Annotated[
        str | None, typer.Option(help="Local tokenizer.json (used if /tokenize is missing).")
    ] = None,
    probe_context: Annotated[
        int | None, typer.Option(help="Send one prompt of N tokens and report prefill.")
    ] = None,
    max_model_len: Annotated[
        int | None, typer.Option(help="Bound for --probe-context (default: the server's).")
    ] = None,
    extra_body: Annotated[
        str | None, typer.Option(help='Extra JSON merged into each request, e.g. {"top_k":1}.')
    ] = None,
    metrics: Annotated[bool, typer.Option(help="Scrape the server's /metrics per cell.")] = True,
    metrics_url: Annotated[
        str | None, typer.Option(help="Where /metrics is (default URL/metrics).")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Write result.json, CSV, PNG plots and report.html here."),
    ] = None,
    detail: Annotated[bool, typer.Option(help="Also print the distributions table.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Run the matrix (or --probe-context) against --url."""
    if ctx.invoked_subcommand is not None:
        return
    from deskside.bench.arrivals import ARRIVALS
    from deskside.bench.outputs.all import write_all
    from deskside.bench.outputs.json import dumps
    from deskside.bench.report import print_result
    from deskside.bench.runner import config_from, run_bench

    startup = None
    try:
        if url is None:
            # the cluster `deskside up` started, when exactly one runs
            from deskside.records.names import find_run

            try:
                running = find_run(None)
            except DesksideError:
                raise UsageError(
                    "no server to bench",
                    hint="deskside bench --url http://HOST:PORT [--model NAME], "
                    "or start a cluster with deskside up",
                ) from None
            url = running.api_url
            model = model or running.served_names[0]
            startup = running.startup
            if running.proxy_url is not None and api_key is None:
                # behind a proxy the engine requires its key (deskside holds it)
                from deskside.secrets import engine_api_key

                api_key = engine_api_key(running.recipe_name).reveal()
        if endpoint not in ("chat", "completions"):
            raise UsageError(f"--endpoint must be chat or completions, not {endpoint!r}")
        if arrivals not in ARRIVALS:
            raise UsageError(f"--arrivals must be poisson or constant, not {arrivals!r}")
        values: dict[str, Any] = {
            "url": url,
            "model": model,
            "endpoint": endpoint,
            "requests": requests,
            "duration_s": duration,
            "warmup": warmup,
            "max_tokens": max_tokens,
            "ignore_eos": ignore_eos,
            "shared_prefix": shared_prefix,
            "seed": seed,
            "timeout_s": timeout,
            "api_key": api_key,
            "tokenizer": tokenizer,
            "probe_context": probe_context,
            "max_model_len": max_model_len,
            "scrape_metrics": metrics,
            "metrics_url": metrics_url,
            "request_rates": _rates(request_rate),
            "arrivals": arrivals,
            "max_in_flight": max_in_flight,
            "turns": turns,
            "conversations": conversations,
            "slo_ttft_s": slo_ttft,
            "slo_tpot_s": slo_tpot,
            "slo_e2e_s": slo_e2e,
        }
        if (lens := _ints(prompt_lens, "--prompt-lens")) is not None:
            values["prompt_lens"] = lens
        if (conc := _ints(concurrency, "--concurrency")) is not None:
            values["concurrency"] = conc
        if extra_body is not None:
            try:
                values["extra_body"] = json.loads(extra_body)
            except ValueError as exc:
                raise UsageError(f"--extra-body is not JSON: {exc}") from None
        config = config_from(**values)
        with _progress(err) as report:
            result = run_bench(config, progress=report)
        if startup is not None:
            from deskside.bench.models import Startup

            result.startup = Startup(
                kind=startup.kind,
                started_at=startup.started_at,
                seconds=startup.seconds,
                regressions=startup.regressions,
            )
    except DesksideError as exc:
        fail(exc, as_json)
        return
    written = write_all(result, out) if out is not None else {}
    if as_json:
        sys.stdout.write(dumps(result))
    else:
        console = stdout_console
        print_result(console, result, detail=detail)
        for kind, path in written.items():
            console.print(f"[dim]wrote {kind}:[/] {shown(path)}", highlight=False)
    failed = [c for c in result.cells if c.metrics.succeeded == 0]
    if (result.probe is not None and not result.probe.accepted) or (
        result.cells and len(failed) == len(result.cells)
    ):
        raise typer.Exit(5)


def _load(cell: Any) -> str:
    return f"{cell.request_rate:g}/s" if cell.request_rate is not None else f"c={cell.concurrency}"


class _progress:
    """A rich progress bar on stderr, fed by the runner's progress callback."""

    def __init__(self, console: Console) -> None:
        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,
        )
        self.task = self.bar.add_task("starting", total=None)

    def __enter__(self) -> Any:
        self.bar.start()
        return self.update

    def __exit__(self, *_: object) -> None:
        self.bar.stop()

    def update(self, event: Any) -> None:
        cell = event.cell
        where = f"{cell.prompt_len:,} tok x {_load(cell)}" if cell else "probe"
        text = f"{where}: {event.stage}" + (f" ({event.message})" if event.message else "")
        self.bar.update(self.task, description=text, completed=event.done, total=event.total)


@app.command("compare")
def compare_cmd(
    a: Annotated[Path, typer.Argument(help="Baseline result.json (or its folder).")],
    b: Annotated[Path, typer.Argument(help="New result.json (or its folder).")],
    min_change: Annotated[
        float, typer.Option(help="Smallest relative change that counts (0.05 = 5%).")
    ] = 0.05,
    z: Annotated[float, typer.Option(help="Standard errors beyond which it is not noise.")] = 2.0,
    as_json: JsonFlag = False,
) -> None:
    """Compare two results; exit 1 when B regressed beyond noise."""
    from rich.table import Table

    from deskside.bench.compare import compare
    from deskside.bench.outputs.json import read_json

    try:
        ra, rb = read_json(a), read_json(b)
    except DesksideError as exc:
        fail(exc, as_json)
        return
    result = compare(ra, rb, str(a), str(b), min_change, z)
    if as_json:
        emit_json({**result.model_dump(mode="json"), "regressions": len(result.regressions)})
    else:
        table = Table(title=f"A = {shown(a)}  vs  B = {shown(b)}")
        for col in ("Prompt", "Load", "Metric", "A", "B", "Change", "z", "Verdict", "Note"):
            table.add_column(
                col, justify="left" if col in ("Metric", "Verdict", "Note") else "right"
            )
        colour = {"regression": "red", "improvement": "green"}
        for row in result.rows:
            verdict: str = row.verdict
            if verdict in colour:
                verdict = f"[{colour[verdict]}]{verdict}[/]"
            table.add_row(
                f"{row.prompt_len:,}",
                str(row.concurrency) if row.request_rate is None else f"{row.request_rate:g}/s",
                shown(row.metric),
                "-" if row.a is None else f"{row.a:,.3f}",
                "-" if row.b is None else f"{row.b:,.3f}",
                "-" if row.change is None else f"{row.change:+.1%}",
                "-" if row.z is None else f"{row.z:.1f}",
                verdict,
                shown(row.note or ""),
            )
        console = stdout_console
        console.print(table)
        console.print(f"{len(result.regressions)} regression(s) beyond noise")
    if result.regressions:
        raise typer.Exit(1)


@app.command("synthetic-server")
def synthetic_server(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (0 = any free one).")] = 8000,
    ttft: Annotated[float, typer.Option(help="Seconds from request to first token.")] = 0.05,
    chunk_interval: Annotated[float, typer.Option(help="Seconds between chunks.")] = 0.01,
    tokens_per_chunk: Annotated[
        str, typer.Option(help="Tokens per decode chunk, cycled (e.g. 1,3,2).")
    ] = "1",
    num_speculative_tokens: Annotated[
        int, typer.Option(help="Report spec-decode counters for this many draft tokens.")
    ] = 0,
) -> None:
    """Serve a synthetic OpenAI-compatible stream with known timings (to try the bench)."""
    from deskside.bench.synthetic import main

    main(
        [
            "--port",
            str(port),
            "--ttft",
            str(ttft),
            "--chunk-interval",
            str(chunk_interval),
            "--tokens-per-chunk",
            tokens_per_chunk,
            "--num-speculative-tokens",
            str(num_speculative_tokens),
        ]
    )
