"""Nodes that must match, as `deskside doctor` findings: every node read at once
(`deskside.deploy.drift.must_match`: kernel, NVIDIA driver, CUDA, the NCCL build the engine
loads, vLLM, deskside, clock, fabric MTU and carrier) and each difference a finding; a node
that cannot be read is a problem naming it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from deskside.deploy import drift
from deskside.doctor.findings import Finding
from deskside.facts.drift import Difference
from deskside.recipe.types import Recipe
from deskside.transport.base import Transport


def finding(d: Difference) -> Finding:
    return Finding(
        kind=d.kind, node=d.node, what=d.what, severity=d.severity, fix=d.fix, detail=d.detail
    )


def must_match(
    recipe: Recipe, recipe_path: Path, transports: Mapping[str, Transport]
) -> list[Finding]:
    """The extra check `deskside doctor` runs (`deskside.doctor.run.ExtraCheck`)."""
    return [finding(d) for d in drift.must_match(recipe, recipe_path, transports)]
