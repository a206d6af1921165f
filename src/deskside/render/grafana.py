"""Grafana dashboard for one recipe, built with the Grafana Foundation SDK
(`grafana-foundation-sdk`, pinned in pyproject) and written as JSON with sorted keys:
`cluster/grafana/dashboards/deskside-<recipe>.json`.

Three rows, as published two-Spark dashboards have them: vLLM (requests, KV cache, latency, tokens,
prefix cache, speculative acceptance), memory and GPU, and RoCE. Metric sources:
- vLLM's /metrics;
- node_exporter: `node_memory_*`, and the RoCE port counters of its `infiniband`
  collector (`node_infiniband_port_data_{received,transmitted}_bytes_total`, ...; names as
  node_exporter 1.5 and later export them);
- deskside's exporter (`deskside.exporter.series`): memory against the plan's floor, GB10
  GPU readings that DCGM does not report, the RoCE GID index and its drift, engine progress.
The datasource is a dashboard variable, so the JSON imports into any Grafana.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import dashboard as gdash
from grafana_foundation_sdk.builders import prometheus as gprom
from grafana_foundation_sdk.builders import timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models import dashboard as model

from deskside.exporter import series
from deskside.render.context import RenderContext
from deskside.render.prometheus import ENGINE_WEDGED_SECONDS

DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")


@dataclass(frozen=True)
class PanelSpec:
    title: str
    description: str
    unit: str
    targets: tuple[tuple[str, str], ...]  # (PromQL, legend)
    threshold: float | None = None  # a red line at this value
    max: float | None = None


def _q(quantile: float, histogram: str) -> str:
    return (
        f"histogram_quantile({quantile:g}, sum by (le) (rate({histogram}_bucket"
        "[$__rate_interval])))"
    )


def vllm_panels(ctx: RenderContext) -> list[PanelSpec]:
    guard = ctx.recipe.guard
    panels = [
        PanelSpec(
            "Requests",
            "Requests decoding now and waiting in the scheduler queue.",
            "short",
            (
                ("sum(vllm:num_requests_running)", "running"),
                ("sum(vllm:num_requests_waiting)", "waiting"),
            ),
        ),
        PanelSpec(
            "KV cache usage",
            f"Fraction of KV cache blocks in use; the line is guard.kv_usage_warn "
            f"({guard.kv_usage_warn:g}).",
            "percentunit",
            (("max(vllm:kv_cache_usage_perc)", "KV cache"),),
            threshold=guard.kv_usage_warn,
            max=1,
        ),
        PanelSpec(
            "Tokens per second",
            "Prompt tokens prefilled and tokens generated per second.",
            "short",
            (
                ("sum(rate(vllm:prompt_tokens_total[$__rate_interval]))", "prompt"),
                ("sum(rate(vllm:generation_tokens_total[$__rate_interval]))", "generated"),
            ),
        ),
        PanelSpec(
            "Time to first token",
            "Request sent to first generated token (reasoning included).",
            "s",
            (
                (_q(0.5, "vllm:time_to_first_token_seconds"), "p50"),
                (_q(0.95, "vllm:time_to_first_token_seconds"), "p95"),
            ),
        ),
        PanelSpec(
            "Inter-token latency",
            "Time between output chunks; with speculative decoding a chunk carries several tokens.",
            "s",
            (
                (_q(0.5, "vllm:inter_token_latency_seconds"), "p50"),
                (_q(0.95, "vllm:inter_token_latency_seconds"), "p95"),
            ),
        ),
        PanelSpec(
            "End-to-end latency and queue time",
            "Whole-request latency and time spent queued before scheduling.",
            "s",
            (
                (_q(0.95, "vllm:e2e_request_latency_seconds"), "e2e p95"),
                (_q(0.95, "vllm:request_queue_time_seconds"), "queue p95"),
            ),
        ),
        PanelSpec(
            "Prefix cache hit rate",
            "Prompt tokens served from the prefix cache.",
            "percentunit",
            (
                (
                    "sum(rate(vllm:prefix_cache_hits_total[$__rate_interval])) / "
                    "sum(rate(vllm:prefix_cache_queries_total[$__rate_interval]))",
                    "hit rate",
                ),
            ),
            max=1,
        ),
        PanelSpec(
            "Preemptions",
            "Requests preempted per second (KV cache exhausted).",
            "short",
            (("sum(rate(vllm:num_preemptions_total[$__rate_interval]))", "preemptions"),),
        ),
        PanelSpec(
            "Seconds since last token",
            "While requests run: time since the engine last generated a token (deskside's "
            "exporter). The line is where the EngineWedged alert starts counting.",
            "s",
            ((series.ENGINE_SINCE_TOKEN, "{{node}}"),),
            threshold=ENGINE_WEDGED_SECONDS,
        ),
    ]
    if ctx.recipe.engine.speculative is not None:
        accepted = "sum(rate(vllm:spec_decode_num_accepted_tokens_total[$__rate_interval]))"
        drafted = "sum(rate(vllm:spec_decode_num_draft_tokens_total[$__rate_interval]))"
        drafts = "sum(rate(vllm:spec_decode_num_drafts_total[$__rate_interval]))"
        per_pos = (
            "sum by (position) (rate(vllm:spec_decode_num_accepted_tokens_per_pos_total"
            "[$__rate_interval]))"
        )
        panels += [
            PanelSpec(
                "Speculative acceptance",
                "Accepted / drafted tokens (overall) and per draft position; the line is "
                f"guard.min_spec_acceptance ({guard.min_spec_acceptance:g}).",
                "percentunit",
                (
                    (f"{accepted} / {drafted}", "overall"),
                    (f"{per_pos} / scalar({drafts})", "position {{position}}"),
                ),
                threshold=guard.min_spec_acceptance,
                max=1,
            ),
            PanelSpec(
                "Mean acceptance length",
                "Tokens committed per speculative step: 1 + accepted / drafts.",
                "short",
                ((f"1 + {accepted} / {drafts}", "tokens per step"),),
            ),
        ]
    return panels


def memory_gpu_panels() -> list[PanelSpec]:
    gpu = "{{node}} gpu {{gpu}}"
    return [
        PanelSpec(
            "Memory available",
            "MemAvailable per node. On GB10 CPU and GPU share this memory: near zero, "
            "the host freezes.",
            "bytes",
            (('node_memory_MemAvailable_bytes{job="node"}', "{{node}}"),),
        ),
        PanelSpec(
            "Memory headroom",
            "MemAvailable against the safety floor the plan keeps outside vLLM, per node "
            "(deskside's exporter). Headroom below zero fires MemoryBelowFloor.",
            "bytes",
            (
                (f"{series.MEMORY_AVAILABLE} - {series.MEMORY_FLOOR}", "{{node}} headroom"),
                (series.MEMORY_AVAILABLE, "{{node}} available"),
                (series.MEMORY_FLOOR, "{{node}} floor"),
            ),
        ),
        PanelSpec(
            "GPU utilisation",
            "From deskside's exporter (NVML).",
            "percentunit",
            ((series.GPU_UTILIZATION, gpu),),
            max=1,
        ),
        PanelSpec(
            "GPU memory",
            "Device memory in use and in total, from deskside's exporter (NVML). On GB10 "
            "the GPU draws on the unified memory above.",
            "bytes",
            (
                (series.GPU_MEMORY_USED, gpu + " used"),
                (series.GPU_MEMORY_TOTAL, gpu + " total"),
            ),
        ),
        PanelSpec(
            "GPU power",
            "From deskside's exporter (NVML).",
            "watt",
            ((series.GPU_POWER, gpu),),
        ),
        PanelSpec(
            "GPU temperature",
            "From deskside's exporter (NVML).",
            "celsius",
            ((series.GPU_TEMPERATURE, gpu),),
        ),
    ]


def roce_panels() -> list[PanelSpec]:
    rate = "rate(node_infiniband_port_{}_total[$__rate_interval])"
    port = "{{node}} {{device}}:{{port}}"
    return [
        PanelSpec(
            "RoCE receive",
            "Bits per second received per RDMA device and port (node_exporter).",
            "bps",
            (("8 * " + rate.format("data_received_bytes"), "{{node}} {{device}}:{{port}}"),),
        ),
        PanelSpec(
            "RoCE transmit",
            "Bits per second sent per RDMA device and port (node_exporter).",
            "bps",
            (("8 * " + rate.format("data_transmitted_bytes"), "{{node}} {{device}}:{{port}}"),),
        ),
        PanelSpec(
            "RoCE errors and discards",
            "Receive errors and discarded packets per second; should stay at zero.",
            "short",
            (
                (rate.format("errors_received"), "{{node}} {{device}}:{{port}} rx errors"),
                (rate.format("discards_received"), "{{node}} {{device}}:{{port}} rx discards"),
                (rate.format("discards_transmitted"), "{{node}} {{device}}:{{port}} tx discards"),
            ),
        ),
        PanelSpec(
            "RoCE congestion and link health",
            "Per second, from node_exporter's infiniband collector: transmit wait (ticks with "
            "data to send but none sent: the port is held back), constraint errors, buffer "
            "overruns, link recoveries and link downs; all but transmit wait should stay at "
            "zero. The RoCE congestion counters proper (ECN-marked packets, CNPs sent and "
            "handled, out-of-sequence packets) are the device's hw_counters, which "
            "node_exporter does not export: read them with `rdma statistic show`.",
            "short",
            tuple(
                (f"rate(node_infiniband_{name}_total[$__rate_interval])", f"{port} {legend}")
                for name, legend in (
                    ("port_transmit_wait", "tx wait"),
                    ("port_constraint_errors_received", "rx constraint errors"),
                    ("port_constraint_errors_transmitted", "tx constraint errors"),
                    ("excessive_buffer_overrun_errors", "buffer overruns"),
                    ("link_error_recovery", "link recoveries"),
                    ("link_downed", "link downs"),
                )
            ),
        ),
        PanelSpec(
            "RoCE GID index and drift",
            "The GID index each fabric address resolves to now, the index the running engine "
            "was launched with (NCCL_IB_GID_INDEX), and drift: 1 when they differ, which "
            "fires RoceGidDrift (deskside's exporter).",
            "short",
            (
                (series.GID_INDEX, "{{node}} {{device}}:{{port}} now"),
                (series.GID_LAUNCHED, "{{node}} {{device}} launched"),
                (series.GID_DRIFT, "{{node}} {{device}} drift"),
            ),
        ),
    ]


def _panel(spec: PanelSpec, panel_id: int) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .id(panel_id)
        .title(spec.title)
        .description(spec.description)
        .datasource(DATASOURCE)
        .unit(spec.unit)
        .min(0)
        .height(8)
        .span(8)
    )
    if spec.max is not None:
        panel = panel.max(spec.max)
    if spec.threshold is not None:
        steps = [
            model.Threshold(value=None, color="green"),
            model.Threshold(value=spec.threshold, color="red"),
        ]
        panel = panel.thresholds(
            gdash.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE).steps(steps)
        )
    for index, (expr, legend) in enumerate(spec.targets):
        panel = panel.with_target(
            gprom.Dataquery()
            .expr(expr)
            .legend_format(legend)
            .ref_id(chr(ord("A") + index))
            .datasource(DATASOURCE)
        )
    return panel


def dashboard(ctx: RenderContext) -> model.Dashboard:
    recipe = ctx.recipe
    builder = (
        gdash.Dashboard(f"deskside: {recipe.name}")
        .uid(f"deskside-{recipe.name}"[:40])
        .description(recipe.description or f"deskside recipe {recipe.name}")
        .tags(["deskside", "vllm"])
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("browser")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .with_variable(
            gdash.DatasourceVariable("datasource").label("Prometheus").type("prometheus")
        )
    )
    next_id = 1
    for row_title, specs in (
        ("vLLM", vllm_panels(ctx)),
        ("Memory and GPU", memory_gpu_panels()),
        ("RoCE fabric", roce_panels()),
    ):
        builder = builder.with_row(gdash.Row(row_title).id(next_id))
        next_id += 1
        for spec in specs:
            builder = builder.with_panel(_panel(spec, next_id))
            next_id += 1
    return builder.build()


def sdk_json(board: model.Dashboard) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(json.dumps(board, cls=JSONEncoder))
    return data


def canonical(data: dict[str, Any]) -> dict[str, Any]:
    """`data` as the SDK's models read and write it back: the form a file must have to pass
    the validators' round trip (the SDK fills defaults the builders leave out)."""
    register_default_plugins()
    return sdk_json(model.Dashboard.from_json(data))


def dashboard_json(ctx: RenderContext) -> dict[str, Any]:
    return canonical(sdk_json(dashboard(ctx)))


def dashboard_file(ctx: RenderContext) -> str:
    return f"deskside-{ctx.recipe.name}.json"
