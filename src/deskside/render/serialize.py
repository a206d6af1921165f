"""Deterministic serialisers for the structured artefacts: YAML (mappings keep the order
they are built in, which the renderers fix; no line folding) and JSON (sorted keys)."""

from __future__ import annotations

import io
import json
import textwrap
from typing import Any

from ruamel.yaml import YAML


def _yaml() -> YAML:
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
    yaml.width = 1 << 16  # never fold a long value over lines
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def yaml_text(data: Any, header: str = "") -> str:
    """`data` as YAML, after `header` (comment lines, each starting with '#')."""
    buffer = io.StringIO()
    _yaml().dump(data, buffer)
    return header + buffer.getvalue()


def json_text(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def comment_header(*lines: str, width: int = 96) -> str:
    """Comment lines ('# ...'), each paragraph wrapped at `width`."""
    out = []
    for line in lines:
        out.extend(textwrap.wrap(line, width - 2, break_long_words=False) or [""])
    return "".join(f"# {line}".rstrip() + "\n" for line in out)
