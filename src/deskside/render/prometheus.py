"""Prometheus on the head: `cluster/prometheus/prometheus.yml` and the alert rules
`cluster/prometheus/rules/deskside.rules.yml` (both checked by `promtool` in the
integration tests).

Scrape jobs:
- `vllm`: the engine's /metrics on the head (workers are headless: no HTTP server), its
  target in `cluster/prometheus/engine-targets.json` (file discovery: a blue/green upgrade
  that moves the engine to another port rewrites that file, and Prometheus follows it
  without a restart);
- `node`: node_exporter on every node (memory, and RoCE port counters from its default
  `infiniband` collector);
- `deskside`: deskside's own exporter on every node, on port `series.EXPORTER_PORT`
  (memory and its floor, GPU readings, the resolved GID index, engine progress);
- `prometheus`: itself, on the head's address.

Alerts (vLLM's own metric names, as its /metrics exports them):
- EngineDown: the head's /metrics does not answer;
- KVCacheUsageHigh: `vllm:kv_cache_usage_perc` (a 0-1 fraction) above guard.kv_usage_warn;
- MemoryHeadroomLow: a node's MemAvailable under `MEMORY_AVAILABLE_WARN` of MemTotal (on
  unified-memory hosts CPU and GPU share it, and running out freezes the host);
- SpecAcceptanceCollapse (speculative decoding only): accepted / drafted tokens below
  guard.min_spec_acceptance while drafts are being made;
- NodeExporterDown: a node's node_exporter does not answer;
- MemoryBelowFloor: a node's available memory (the guard's: MemAvailable, or the memory
  cgroup's headroom when smaller) under the plan's safety floor (deskside's exporter); with
  guard.enforce it fires before the guard stops the engine (`below_floor_for`);
- RoceGidDrift: the GID index the fabric address resolves to now differs from the one the
  running engine was launched with;
- EngineWedged: requests are running but no token has come for `ENGINE_WEDGED_SECONDS`;
- DesksideExporterDown: a node's deskside exporter does not answer.

`deskside.render.rule_tests` writes a promtool test for every alert beside the rules.
"""

from __future__ import annotations

import re
from typing import Any

from deskside.engine.launch import probe_host
from deskside.exporter import series
from deskside.recipe.types import Recipe
from deskside.render.context import RenderContext
from deskside.render.serialize import comment_header, json_text, yaml_text

MEMORY_AVAILABLE_WARN = 0.05
"""MemoryHeadroomLow fires when MemAvailable is under this fraction of MemTotal. A published
two-Spark head sat at ~1% free (1.3 GB of 128 GB) while a leftover engine still ran
(docs/flagship.md #28); a planned GB10 at 0.82 keeps ~12% available."""

ENGINE_WEDGED_SECONDS = 300
"""EngineWedged fires when requests run but no token has come for this long. The longest
legitimate silence is a prefill of a whole context with nothing else decoding: the flagship's
204,800 tokens at a conservative 2,000 prompt tokens per second take ~100 s. 300 s stays clear
of that and still catches a wedged engine (a hung collective, a dead rank) within minutes."""

BELOW_FLOOR_FOR_SECONDS = 60
"""MemoryBelowFloor's `for:` when the guard only warns (guard.enforce false)."""

_DURATION = re.compile(r"([0-9]+)(ms|s|m|h|d|w|y)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def seconds(duration: str) -> float:
    """A Prometheus duration ('1m', '1h30m') in seconds."""
    return sum(int(n) * _UNITS[u] for n, u in _DURATION.findall(duration))


def below_floor_for(ctx: RenderContext) -> int:
    """Seconds MemoryBelowFloor waits before it fires. With guard.enforce it must fire
    before the guard stops the engine: a drop can land just after a scrape and show one
    scrape late, and the rule is evaluated once per scrape interval, so the alert waits the
    window less two scrape intervals (at least 0, at most BELOW_FLOOR_FOR_SECONDS)."""
    guard = ctx.recipe.guard
    if not guard.enforce:
        return BELOW_FLOOR_FOR_SECONDS
    scrape = seconds(ctx.recipe.monitoring.scrape_interval)
    return max(0, min(BELOW_FLOOR_FOR_SECONDS, int(guard.window - 2 * scrape)))


RULES_FILE = "rules/deskside.rules.yml"
RULES_TEST_FILE = "rules/deskside.rules.test.yml"


ENGINE_TARGETS_FILE = "engine-targets.json"
"""The `vllm` job's target, beside prometheus.yml (file_sd_configs: a relative file is read
from the configuration's folder, and re-read when it changes)."""


def _target(host: str, port: int) -> str:
    return f"{host}:{port}"


def engine_targets(recipe: Recipe) -> list[dict[str, Any]]:
    """The `vllm` job's target group: the head engine's /metrics at engine.port."""
    return [
        {
            "targets": [_target(probe_host(recipe), recipe.engine.port)],
            "labels": {"node": recipe.head.name, "role": "head"},
        }
    ]


def render_engine_targets(recipe: Recipe) -> str:
    return json_text(engine_targets(recipe))


def prometheus_config(ctx: RenderContext) -> dict[str, Any]:
    recipe = ctx.recipe
    mon = recipe.monitoring
    nodes = recipe.cluster.nodes

    def per_node(port: int) -> list[dict[str, Any]]:
        return [
            {"targets": [_target(n.address, port)], "labels": {"node": n.name, "role": n.role}}
            for n in nodes
        ]

    return {
        "global": {
            "scrape_interval": mon.scrape_interval,
            "evaluation_interval": mon.scrape_interval,
            "external_labels": {"deskside_recipe": recipe.name},
        },
        "rule_files": [RULES_FILE],
        "scrape_configs": [
            {
                "job_name": "vllm",
                "metrics_path": "/metrics",
                "file_sd_configs": [
                    {"files": [ENGINE_TARGETS_FILE], "refresh_interval": mon.scrape_interval}
                ],
            },
            {"job_name": "node", "static_configs": per_node(mon.node_exporter_port)},
            {"job_name": "deskside", "static_configs": per_node(series.EXPORTER_PORT)},
            {
                "job_name": "prometheus",
                "static_configs": [
                    {
                        "targets": [_target(recipe.head.address, mon.prometheus_port)],
                        "labels": {"node": recipe.head.name, "role": "head"},
                    }
                ],
            },
        ],
    }


def _pct(x: float) -> str:
    return f"{x * 100:g}%"


def alert_rules(ctx: RenderContext) -> dict[str, Any]:
    recipe = ctx.recipe
    guard = recipe.guard
    rules: list[dict[str, Any]] = [
        {
            "alert": "EngineDown",
            "expr": 'up{job="vllm"} == 0',
            "for": "1m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "vLLM engine on {{ $labels.node }} is down",
                "description": "The head's /metrics ({{ $labels.instance }}) has not answered "
                "for a minute: the engine or one of its worker ranks has stopped.",
            },
        },
        {
            "alert": "KVCacheUsageHigh",
            "expr": f"max by (instance, node) (vllm:kv_cache_usage_perc) > {guard.kv_usage_warn:g}",
            "for": "5m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": f"KV cache above {_pct(guard.kv_usage_warn)} on {{{{ $labels.node }}}}",
                "description": "KV cache usage is {{ $value | humanizePercentage }} "
                f"(guard.kv_usage_warn {guard.kv_usage_warn:g}): requests will queue or be "
                "preempted.",
            },
        },
        {
            "alert": "MemoryHeadroomLow",
            "expr": 'node_memory_MemAvailable_bytes{job="node"} / '
            f'node_memory_MemTotal_bytes{{job="node"}} < {MEMORY_AVAILABLE_WARN:g}',
            "for": "2m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "Memory headroom low on {{ $labels.node }}",
                "description": "Only {{ $value | humanizePercentage }} of memory is available. "
                "On unified-memory hosts (GB10) CPU and GPU share it, and running out "
                "freezes the host: stop what else runs there or lower "
                "gpu_memory_utilization.",
            },
        },
        {
            "alert": "NodeExporterDown",
            "expr": 'up{job="node"} == 0',
            "for": "5m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "node_exporter on {{ $labels.node }} is down",
                "description": "No memory or RoCE metrics from {{ $labels.instance }}.",
            },
        },
    ]
    rules += exporter_rules(ctx)
    if recipe.engine.speculative is not None and guard.min_spec_acceptance > 0:
        drafts = "rate(vllm:spec_decode_num_draft_tokens_total[10m])"
        accepted = "rate(vllm:spec_decode_num_accepted_tokens_total[10m])"
        rules.append(
            {
                "alert": "SpecAcceptanceCollapse",
                "expr": f"(sum by (instance, node) ({accepted}) / sum by (instance, node) "
                f"({drafts})) < {guard.min_spec_acceptance:g} and sum by (instance, node) "
                f"({drafts}) > 0",
                "for": "10m",
                "labels": {"severity": "warning"},
                "annotations": {
                    "summary": "Speculative draft acceptance collapsed on {{ $labels.node }}",
                    "description": "Draft acceptance is {{ $value | humanizePercentage }} "
                    f"(guard.min_spec_acceptance {guard.min_spec_acceptance:g}): speculative "
                    f"decoding ({recipe.engine.speculative.method}) now costs more than it "
                    "saves. Check the draft model and the image's patches.",
                },
            }
        )
    return {"groups": [{"name": f"deskside-{recipe.name}", "rules": rules}]}


def _duration(whole_seconds: int) -> str:
    """A Prometheus duration: whole minutes as '1m', else seconds."""
    if whole_seconds and whole_seconds % 60 == 0:
        return f"{whole_seconds // 60}m"
    return f"{whole_seconds}s"


def _below_floor(ctx: RenderContext) -> dict[str, Any]:
    guard = ctx.recipe.guard
    then = (
        f"deskside's guard stops the engine once it has stayed there for {guard.window:g} s."
        if guard.enforce
        else "stop what else runs there."
    )
    return {
        "alert": "MemoryBelowFloor",
        "expr": f"{series.GUARD_AVAILABLE} < {series.MEMORY_FLOOR}",
        "for": _duration(below_floor_for(ctx)),
        "labels": {"severity": "critical"},
        "annotations": {
            "summary": "Memory below the safety floor on {{ $labels.node }}",
            "description": "Only {{ $value | humanize1024 }}B of memory is available (the "
            "smaller of MemAvailable and the node's memory cgroup headroom), under the floor "
            "the plan keeps outside vLLM. On unified-memory hosts (GB10) CPU and GPU share it, "
            f"and running out freezes the host: {then}",
        },
    }


def exporter_rules(ctx: RenderContext) -> list[dict[str, Any]]:
    """The alerts on the series of deskside's exporter."""
    return [
        _below_floor(ctx),
        {
            "alert": "RoceGidDrift",
            "expr": f"{series.GID_DRIFT} == 1",
            "for": "1m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "RoCE GID index drifted on {{ $labels.node }} ({{ $labels.device }})",
                "description": "The fabric address now resolves to another GID index than the "
                "running engine was launched with (NCCL_IB_GID_INDEX): its RDMA connections "
                "can fail. Restart the engine so launch.sh resolves the index again.",
            },
        },
        {
            "alert": "EngineWedged",
            "expr": f"{series.ENGINE_SINCE_TOKEN} > {ENGINE_WEDGED_SECONDS} and "
            f"{series.ENGINE_RUNNING} > 0",
            "for": "1m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "Engine on {{ $labels.node }} is wedged",
                "description": "Requests are running but no token has been generated for "
                "{{ $value }} s: a rank or a collective may hang. Check every node's engine "
                "log, then restart the engine.",
            },
        },
        {
            "alert": "DesksideExporterDown",
            "expr": 'up{job="deskside"} == 0',
            "for": "5m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "deskside exporter on {{ $labels.node }} is down",
                "description": "No memory floor, GPU, GID or engine progress metrics from "
                "{{ $labels.instance }}.",
            },
        },
    ]


def render_prometheus_config(ctx: RenderContext) -> str:
    header = comment_header(
        f"{ctx.recipe.name}: Prometheus scrape configuration (vLLM, node_exporter, deskside).",
        f"Rendered by `deskside render` from {ctx.recipe_file}.",
    )
    return yaml_text(prometheus_config(ctx), header)


def render_alert_rules(ctx: RenderContext) -> str:
    header = comment_header(
        f"{ctx.recipe.name}: alert rules (engine down or wedged, KV cache usage, memory "
        "headroom and floor, RoCE GID drift, exporters down, speculative acceptance).",
        f"Rendered by `deskside render` from {ctx.recipe_file}.",
    )
    return yaml_text(alert_rules(ctx), header)
