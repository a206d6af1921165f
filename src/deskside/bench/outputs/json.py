"""JSON: the whole BenchResult, schema-versioned, every per-request record included."""

from __future__ import annotations

import json as _json
from pathlib import Path
from typing import Any

from deskside.bench.models import SCHEMA_VERSION, BenchResult
from deskside.errors import UsageError


def to_dict(result: BenchResult) -> dict[str, Any]:
    return result.model_dump(mode="json")


def dumps(result: BenchResult) -> str:
    """Compact JSON: with every chunk time of every request a result is large, and only the
    compact form is encoded by the json module's C encoder (indenting is pure Python)."""
    return result.model_dump_json() + "\n"


def write_json(result: BenchResult, path: Path) -> Path:
    path.write_text(dumps(result))
    return path


def read_json(path: Path) -> BenchResult:
    """Load a result written by :func:`write_json` (a file, or a folder holding result.json)."""
    if path.is_dir():
        path = path / "result.json"
    try:
        data = _json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read bench result {path}: {exc}") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != SCHEMA_VERSION:
        raise UsageError(f"{path} is not a {SCHEMA_VERSION} result (schema_version {version!r})")
    return BenchResult.model_validate(data)
