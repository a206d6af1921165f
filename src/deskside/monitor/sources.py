"""Every PromQL expression a recipe's monitoring holds, read from the rendered dashboards
and alert rules (never from a list kept here, so new panels and rules are checked as soon
as they are rendered)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from deskside.planner.plan import Plan
from deskside.recipe.types import Recipe
from deskside.render.context import RenderContext, build_context
from deskside.render.grafana import dashboard_json
from deskside.render.prometheus import alert_rules, prometheus_config


@dataclass(frozen=True)
class Expression:
    expr: str  # as rendered
    source: str  # dashboard:<panel title>/<refId>, rule:<alert name>, record:<name>
    kind: Literal["dashboard", "rule"]


@dataclass(frozen=True)
class Monitoring:
    """What `deskside monitor check` needs of a rendered recipe."""

    expressions: list[Expression]
    scrape_interval: str
    jobs: list[str]  # the scrape jobs of the rendered Prometheus configuration


def _panels(panels: list[Any]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        if not isinstance(panel, dict):
            continue
        yield panel
        yield from _panels(panel.get("panels") or [])  # a collapsed row holds its panels


def dashboard_expressions(board: dict[str, Any]) -> list[Expression]:
    found = []
    for panel in _panels(board.get("panels") or []):
        title = str(panel.get("title") or f"panel {panel.get('id', '?')}")
        for index, target in enumerate(panel.get("targets") or []):
            expr = target.get("expr") if isinstance(target, dict) else None
            if isinstance(expr, str) and expr.strip():
                ref = target.get("refId") or chr(ord("A") + index)
                found.append(Expression(expr, f"dashboard:{title}/{ref}", "dashboard"))
    return found


def rule_expressions(rules: dict[str, Any]) -> list[Expression]:
    found = []
    for group in rules.get("groups") or []:
        for rule in group.get("rules") or []:
            expr = rule.get("expr")
            if not isinstance(expr, str):
                continue
            if "alert" in rule:
                found.append(Expression(expr, f"rule:{rule['alert']}", "rule"))
            else:
                found.append(Expression(expr, f"record:{rule.get('record', '?')}", "rule"))
    return found


def from_context(ctx: RenderContext) -> Monitoring:
    config = prometheus_config(ctx)
    return Monitoring(
        expressions=dashboard_expressions(dashboard_json(ctx)) + rule_expressions(alert_rules(ctx)),
        scrape_interval=str(config.get("global", {}).get("scrape_interval", "15s")),
        jobs=[str(j["job_name"]) for j in config.get("scrape_configs", [])],
    )


def rendered(recipe: Recipe, recipe_path: Path, plan: Plan) -> Monitoring:
    """The recipe's dashboards and rules, rendered in memory."""
    return from_context(build_context(recipe, recipe_path, plan))
