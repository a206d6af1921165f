"""promtool unit tests for the alert rules: `cluster/prometheus/rules/deskside.rules.test.yml`,
run with `promtool test rules deskside.rules.test.yml` in that folder.

Every alert gets at least one case where it fires (inputs past its threshold, evaluated after
its `for:`) and one where it stays quiet (inputs just on the safe side). The inputs come from
the recipe's thresholds (guard values, the module constants of `deskside.render.prometheus`),
never from the rendered expressions: a rule whose threshold is changed without its tests
fails them. The expected alerts carry their labels and annotations, expanded here from the
annotation templates (`expand`, which knows the few template forms the rules use).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deskside.exporter import series
from deskside.render.context import RenderContext
from deskside.render.prometheus import (
    ENGINE_WEDGED_SECONDS,
    MEMORY_AVAILABLE_WARN,
    RULES_FILE,
    alert_rules,
    seconds,
)
from deskside.render.serialize import comment_header, yaml_text

INTERVAL_SECONDS = 60
"""The sample interval of the test inputs."""

GIB = 1 << 30
MEM_TOTAL = 128 * GIB  # a GB10's unified memory
MEM_FLOOR = 21 * GIB  # the gb10 profile's safety floor


def _go_float(value: float) -> str:
    """A float as Go's fmt prints it (%v): integers without a fraction."""
    if float(value).is_integer() and abs(value) < 1e21:
        return str(int(value))
    return repr(value)


def humanize1024(value: float) -> str:
    """Prometheus's `humanize1024` template function."""
    if abs(value) <= 1:
        return f"{value:.4g}"
    prefix = ""
    for p in ("ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"):
        if abs(value) < 1024:
            break
        prefix = p
        value /= 1024
    return f"{value:.4g}{prefix}"


_TEMPLATE = re.compile(r"\{\{\s*(.*?)\s*\}\}")


def expand(template: str, labels: dict[str, str], value: float) -> str:
    """An annotation template as Prometheus expands it, for the forms the rules use:
    `$labels.<name>`, `$value`, `$value | humanizePercentage`, `$value | humanize1024`."""

    def one(match: re.Match[str]) -> str:
        expr = re.sub(r"\s+", " ", match.group(1))
        if expr.startswith("$labels."):
            return labels.get(expr.removeprefix("$labels."), "")
        if expr == "$value":
            return _go_float(float(value))
        if expr == "$value | humanizePercentage":
            return f"{value * 100:.4g}%"
        if expr == "$value | humanize1024":
            return humanize1024(value)
        raise ValueError(f"annotation template {match.group(0)!r}: not known to rule_tests")

    return _TEMPLATE.sub(one, template)


def _label_value(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@dataclass(frozen=True)
class Series:
    name: str
    labels: dict[str, str]
    start: float
    step: float = 0  # added every interval (counters)

    def selector(self) -> str:
        inner = ", ".join(f"{k}={_label_value(v)}" for k, v in sorted(self.labels.items()))
        return f"{self.name}{{{inner}}}"

    def values(self, samples: int) -> str:
        start = _go_float(float(self.start))
        if self.step:
            return f"{start}+{_go_float(float(self.step))}x{samples}"
        return f"{start}x{samples}"


@dataclass(frozen=True)
class Case:
    """One test: inputs, and whether the alert fires with `labels` and `value`."""

    what: str
    inputs: tuple[Series, ...]
    fires: bool
    labels: dict[str, str] = field(default_factory=dict)  # the alert's labels from the data
    value: float = 0.0  # the alert's $value when it fires
    at: int | None = None  # evaluate at this second (default: after the rule's `for:`)
    interval: int = INTERVAL_SECONDS  # seconds between input samples


def _node(ctx: RenderContext, job: str, port: int | None = None) -> dict[str, str]:
    head = ctx.recipe.head
    target = f"{head.address}:{port}" if port is not None else f"{head.address}:1"
    return {"job": job, "instance": target, "node": head.name}


def _up(ctx: RenderContext, job: str, port: int) -> list[Case]:
    labels = _node(ctx, job, port)
    return [
        Case(f"{job} target down", (Series("up", labels, 0),), True, labels, 0),
        Case(f"{job} target up", (Series("up", labels, 1),), False),
    ]


def _kv(ctx: RenderContext) -> list[Case]:
    warn = ctx.recipe.guard.kv_usage_warn
    labels = _node(ctx, "vllm", ctx.recipe.engine.port)
    name = "vllm:kv_cache_usage_perc"
    high, low = warn + 0.01, warn - min(0.01, warn / 2)
    by = {k: labels[k] for k in ("instance", "node")}
    return [
        Case("KV cache just above the line", (Series(name, labels, high),), True, by, high),
        Case("KV cache just below the line", (Series(name, labels, low),), False),
    ]


def _headroom(ctx: RenderContext) -> list[Case]:
    labels = _node(ctx, "node", ctx.recipe.monitoring.node_exporter_port)
    low = int(MEM_TOTAL * (MEMORY_AVAILABLE_WARN - 0.01))
    ok = int(MEM_TOTAL * (MEMORY_AVAILABLE_WARN + 0.01))
    total = Series("node_memory_MemTotal_bytes", labels, MEM_TOTAL)

    def avail(v: int) -> Series:
        return Series("node_memory_MemAvailable_bytes", labels, v)

    return [
        Case("available just under the line", (avail(low), total), True, labels, low / MEM_TOTAL),
        Case("available just over the line", (avail(ok), total), False),
    ]


def _floor(ctx: RenderContext) -> list[Case]:
    labels = _node(ctx, "deskside", series.EXPORTER_PORT)
    floor = Series(series.MEMORY_FLOOR, labels, MEM_FLOOR)
    below, above = MEM_FLOOR - GIB, MEM_FLOOR + GIB

    def avail(v: int) -> Series:
        return Series(series.GUARD_AVAILABLE, labels, v)

    cases = [
        Case("available under the floor", (avail(below), floor), True, labels, below),
        Case("available over the floor", (avail(above), floor), False),
    ]
    guard = ctx.recipe.guard
    if guard.enforce:
        # under the floor from the first sample, one sample per scrape: the alert must
        # fire by the last evaluation before the guard acts, one scrape before the window
        # ends (the drop may show a scrape late)
        scrape = max(1, int(seconds(ctx.recipe.monitoring.scrape_interval)))
        at = max(0, int(guard.window) - scrape)
        cases.append(
            Case(
                f"fires before the guard stops the engine ({guard.window:g} s)",
                (avail(below), floor),
                True,
                labels,
                below,
                at=at - at % scrape,
                interval=scrape,
            )
        )
    return cases


def _gid(ctx: RenderContext) -> list[Case]:
    labels = {**_node(ctx, "deskside", series.EXPORTER_PORT), "device": "rocep1s0f0"}
    return [
        Case("GID index drifted", (Series(series.GID_DRIFT, labels, 1),), True, labels, 1),
        Case("GID index as launched", (Series(series.GID_DRIFT, labels, 0),), False),
    ]


def _wedged(ctx: RenderContext) -> list[Case]:
    labels = _node(ctx, "deskside", series.EXPORTER_PORT)
    late, recent = ENGINE_WEDGED_SECONDS + 30, ENGINE_WEDGED_SECONDS - 30

    def inputs(since: int, running: int) -> tuple[Series, ...]:
        return (
            Series(series.ENGINE_SINCE_TOKEN, labels, since),
            Series(series.ENGINE_RUNNING, labels, running),
        )

    return [
        Case("requests running, no token for long", inputs(late, 2), True, labels, late),
        Case("requests running, a token lately", inputs(recent, 2), False),
        Case("no token for long, nothing running", inputs(late, 0), False),
    ]


def _spec(ctx: RenderContext) -> list[Case]:
    floor = ctx.recipe.guard.min_spec_acceptance
    labels = _node(ctx, "vllm", ctx.recipe.engine.port)
    by = {k: labels[k] for k in ("instance", "node")}
    drafts = 1000  # drafted tokens per interval
    low = round(drafts * max(floor - 0.05, floor / 2))
    high = round(drafts * min(floor + 0.05, (1 + floor) / 2))

    def inputs(accepted: int) -> tuple[Series, ...]:
        return (
            Series("vllm:spec_decode_num_draft_tokens_total", labels, 0, drafts),
            Series("vllm:spec_decode_num_accepted_tokens_total", labels, 0, accepted),
        )

    return [
        Case("acceptance under the floor", inputs(low), True, by, low / drafts),
        Case("acceptance over the floor", inputs(high), False),
    ]


CASES: dict[str, Callable[[RenderContext], list[Case]]] = {
    "EngineDown": lambda ctx: _up(ctx, "vllm", ctx.recipe.engine.port),
    "KVCacheUsageHigh": _kv,
    "MemoryHeadroomLow": _headroom,
    "NodeExporterDown": lambda ctx: _up(ctx, "node", ctx.recipe.monitoring.node_exporter_port),
    "MemoryBelowFloor": _floor,
    "RoceGidDrift": _gid,
    "EngineWedged": _wedged,
    "DesksideExporterDown": lambda ctx: _up(ctx, "deskside", series.EXPORTER_PORT),
    "SpecAcceptanceCollapse": _spec,
}
"""The cases of every alert deskside renders, by alert name."""

LOOKBACK_SECONDS = {"SpecAcceptanceCollapse": 600}
"""Alerts over a range (rate over 10m) need that much input before they can fire."""


def _test(rule: dict[str, Any], case: Case) -> dict[str, Any]:
    name = rule["alert"]
    wait = seconds(rule.get("for", "0s")) + LOOKBACK_SECONDS.get(name, 0)
    eval_seconds = int(wait) + 2 * case.interval if case.at is None else case.at
    samples = eval_seconds // case.interval + 5
    expected: list[dict[str, Any]] = []
    if case.fires:
        labels = {**case.labels, **rule.get("labels", {})}
        expected.append(
            {
                "exp_labels": labels,
                "exp_annotations": {
                    k: expand(v, {**labels, "alertname": name}, case.value)
                    for k, v in rule.get("annotations", {}).items()
                },
            }
        )
    return {
        "name": f"{name}: {case.what} ({'fires' if case.fires else 'quiet'})",
        "interval": f"{case.interval}s",
        "input_series": [
            {"series": s.selector(), "values": s.values(samples)} for s in case.inputs
        ],
        "alert_rule_test": [
            {"eval_time": f"{eval_seconds}s", "alertname": name, "exp_alerts": expected}
        ],
    }


def rules_of(rules: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for group in rules["groups"] for r in group["rules"] if "alert" in r]


def rule_tests(ctx: RenderContext) -> dict[str, Any]:
    """The promtool test file of the rules `alert_rules(ctx)` renders."""
    tests = []
    for rule in rules_of(alert_rules(ctx)):
        name = rule["alert"]
        if name not in CASES:
            raise ValueError(f"alert {name} has no promtool test cases (rule_tests.CASES)")
        tests += [_test(rule, case) for case in CASES[name](ctx)]
    return {
        "rule_files": [RULES_FILE.rpartition("/")[2]],
        # as Prometheus evaluates them (prometheus.yml: evaluation_interval = scrape_interval)
        "evaluation_interval": ctx.recipe.monitoring.scrape_interval,
        "tests": tests,
    }


def render_rule_tests(ctx: RenderContext) -> str:
    header = comment_header(
        f"{ctx.recipe.name}: promtool tests of the alert rules beside this file: each alert "
        "fires past its threshold and stays quiet on the safe side. Run them in this folder "
        "with `promtool test rules deskside.rules.test.yml`.",
        f"Rendered by `deskside render` from {ctx.recipe_file}.",
    )
    return yaml_text(rule_tests(ctx), header)
