"""Which model a node's engine serves: the model section of the recipe its release was
rendered from (`current/recipe.yaml`, JSON), or of the recipe file of a run on this
machine. `repo@revision` (the revision vLLM loads from the node's cache), else the path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from deskside.errors import DesksideError
from deskside.transport.base import Transport


def model_text(model: Any) -> str | None:
    if not isinstance(model, dict):
        return None
    if model.get("repo"):
        rev = model.get("revision")
        return f"{model['repo']}@{rev}" if rev else str(model["repo"])
    path = model.get("path")
    return str(path) if path else None


def served_model(t: Transport, recipe_dir: str, recipe_file: str | None) -> str | None:
    """None when it cannot be told (no release, an unreadable recipe)."""
    try:
        data = json.loads(t.get(f"{recipe_dir}/current/recipe.yaml"))
        return model_text(data.get("model"))
    except (FileNotFoundError, ValueError, AttributeError, DesksideError):
        pass
    if recipe_file is None:
        return None
    try:
        local = YAML(typ="safe").load(Path(recipe_file).read_text())
        return model_text(local.get("model")) if isinstance(local, dict) else None
    except (OSError, ValueError, AttributeError):
        return None
    except Exception:
        return None
